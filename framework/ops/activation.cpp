#include "ops/activation.h"

#include "autograd/node.h"
#include "backend/cpu/activation.h"
#include "ops/device_check.h"
#include "ops/elementwise.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/activation.h"
#endif

namespace dpt {
namespace {

// The dispatch points: backend/cuda for CUDA tensors, backend/cpu otherwise.
void relu_forward_on(const Tensor& x, const Tensor& out) {
#ifdef DPT_WITH_CUDA
  if (out.device().is_cuda()) return cuda::relu_forward(x, out);
#endif
  cpu::relu_forward(x.data<float>(), out.data<float>(), out.numel());
}

void add_relu_forward_on(const Tensor& a, const Tensor& b, const Tensor& out) {
#ifdef DPT_WITH_CUDA
  if (out.device().is_cuda()) return cuda::add_relu_forward(a, b, out);
#endif
  cpu::add_relu_forward(a.data<float>(), b.data<float>(), out.data<float>(), out.numel());
}

void relu_backward_on(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in) {
#ifdef DPT_WITH_CUDA
  if (out.device().is_cuda()) return cuda::relu_backward(out, grad_out, grad_in);
#endif
  cpu::relu_backward(out.data<float>(), grad_out.data<float>(), grad_in.data<float>(), out.numel());
}

// The gradient through a ReLU whose output is `out`: g where out > 0, else 0, in out's layout.
Tensor relu_gradient(const char* what, const Tensor& out, const Tensor& g) {
  check_grad(what, g, out.device(), out.dtype());
  Tensor gi = Tensor::empty_like(out);
  relu_backward_on(out, layout_like_on_device(g, out), gi);
  return gi;
}

}  // namespace

Tensor relu(const Tensor& x) {
  op_device_mixed("relu", {&x});
  // Elementwise on the raw buffer: any dense layout (channels-last included) is kept.
  Tensor in = x.is_dense() ? x : contiguous_on_device(x);
  Tensor out = Tensor::empty_like(in);
  relu_forward_on(in, out);
  // The output alone decides the mask (out > 0), so the input need not be kept.
  autograd::record("relu", out, {x}, [out = out.detach()](const Tensor& g) {
    return std::vector<Tensor>{relu_gradient("relu backward", out, g)};
  });
  return out;
}

Tensor add_relu(const Tensor& a, const Tensor& b) {
  op_device_mixed("add_relu", {&a, &b});
  DPT_CHECK(a.shape() == b.shape()) << "add_relu: expected inputs of one shape (it does not broadcast), got "
                                    << shape_str(a.shape()) << " and " << shape_str(b.shape());
  // One flat pass over the raw buffers needs one dense layout for both, as a BasicBlock has
  // (channels-last on the CPU, NCHW or NHWC on CUDA); anything else takes the two ops.
  if (!(a.strides() == b.strides() && a.is_dense())) return relu(add(a, b));
  Tensor out = Tensor::empty_like(a);
  add_relu_forward_on(a, b, out);
  // Both inputs get the one masked gradient, as relu(add(a, b)) gives them (add passes its
  // gradient through to both): no backward writes into its incoming gradient, and the
  // engine sums two gradients reaching one node into a new tensor (autograd/accumulate.h).
  autograd::record("add_relu", out, {a, b}, [out = out.detach()](const Tensor& g) {
    Tensor gi = relu_gradient("add_relu backward", out, g);
    return std::vector<Tensor>{gi, gi};
  });
  return out;
}

}  // namespace dpt
