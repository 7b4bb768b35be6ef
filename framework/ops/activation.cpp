// relu and add_relu (a residual block's add and ReLU in one pass), elementwise on the raw
// buffers of the device's kernels, so any dense layout is kept.
#include "ops/activation.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/device_check.h"
#include "ops/elementwise.h"

namespace dpt {

Tensor relu(const Tensor& x) {
  op_device_mixed("relu", {&x});
  Tensor in = x.is_dense() ? x : contiguous_on_device(x);
  Tensor out = Tensor::empty_like(in);
  kernels_for(out.device()).relu_forward(in, out);
  // The output alone decides the mask (out > 0), so the input need not be kept.
  autograd::record("relu", out, {x}, [out = out.detach()](const Tensor& g) {
    return std::vector<Tensor>{relu_gradient(out, g)};
  });
  return out;
}

Tensor add_relu(const Tensor& a, const Tensor& b) {
  op_device_mixed("add_relu", {&a, &b});
  DPT_CHECK(a.shape() == b.shape()) << "add_relu: expected inputs of one shape (it does not broadcast), got "
                                    << shape_str(a.shape()) << " and " << shape_str(b.shape());
  // One flat pass needs one dense layout for both; anything else takes the two ops.
  if (!(a.strides() == b.strides() && a.is_dense())) return relu(add(a, b));
  Tensor out = Tensor::empty_like(a);
  kernels_for(out.device()).add_relu_forward(a, b, out);
  // Both inputs get the one masked gradient, as relu(add(a, b)) gives them (no backward
  // writes into its incoming gradient).
  autograd::record("add_relu", out, {a, b}, [out = out.detach()](const Tensor& g) {
    Tensor gi = relu_gradient(out, g);
    return std::vector<Tensor>{gi, gi};
  });
  return out;
}

}  // namespace dpt
