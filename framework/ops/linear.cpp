// linear and matmul: checks, then the device's matrix products (oneDNN, cuBLAS).
#include "ops/linear.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/device_check.h"
#include "ops/mac_count.h"

namespace dpt {
namespace {

// out = a op(b) (+ bias, then ReLU), op(b) = b^T when `tb`: linear's product and matmul's,
// with one backward, which computes only the gradients some input needs.
Tensor product(const char* name, const Tensor& a_in, const Tensor& b_in, bool tb, const Tensor& bias_in,
               bool fuse_relu) {
  const Device device = a_in.device();
  const DType dtype = a_in.dtype();
  const Kernels& k = kernels_for(device);
  Tensor a = contiguous_on_device(a_in), b = contiguous_on_device(b_in);
  Tensor bias = bias_in.defined() ? contiguous_on_device(bias_in) : Tensor();
  Tensor out = Tensor::empty({a.size(0), b.size(tb ? 0 : 1)}, dtype, device);
  if (out.numel() > 0) k.matmul(a, false, b, tb, bias, fuse_relu, out);
  bool need_a = a_in.requires_grad(), need_b = b_in.requires_grad();
  bool need_bias = bias_in.defined() && bias_in.requires_grad();
  autograd::record(name, out, {a_in, b_in, bias_in},
                   [&k, a = need_b ? a.detach() : Tensor(), b = need_a ? b.detach() : Tensor(),
                    out = fuse_relu ? out.detach() : Tensor(), a_shape = a.shape(), b_shape = b.shape(), tb,
                    device, dtype, need_a, need_b, need_bias](const Tensor& grad_out) {
                     Tensor g = contiguous_on_device(grad_out);
                     if (out.defined()) g = relu_gradient(out, g);  // fused ReLU
                     std::vector<Tensor> grads(3);
                     if (need_a) {  // dL/da = g op(b)^T
                       grads[0] = Tensor::empty(a_shape, dtype, device);
                       k.matmul(g, false, b, !tb, Tensor(), false, grads[0]);
                     }
                     if (need_b) {  // dL/db = a^T g, or g^T a when b was transposed
                       grads[1] = Tensor::empty(b_shape, dtype, device);
                       if (tb)
                         k.matmul(g, true, a, false, Tensor(), false, grads[1]);
                       else
                         k.matmul(a, true, g, false, Tensor(), false, grads[1]);
                     }
                     if (need_bias) {
                       grads[2] = Tensor::empty({b_shape[0]}, DType::f32, device);
                       k.sum_rows(g, grads[2]);
                     }
                     return grads;
                   });
  return out;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias, bool fuse_relu) {
  Device device = op_device_mixed("linear", {&x, &w});
  DPT_CHECK(!bias.defined() || (bias.dtype() == DType::f32 && bias.device() == device))
      << "linear: bias must be f32 on " << device.str();
  DPT_CHECK(x.dim() == 2) << "linear: input must be 2-D [N, in], got " << shape_str(x.shape());
  DPT_CHECK(w.dim() == 2) << "linear: weight must be 2-D [out, in], got " << shape_str(w.shape());
  DPT_CHECK(x.size(1) == w.size(1)) << "linear: input " << shape_str(x.shape()) << " has " << x.size(1)
                                    << " features but weight " << shape_str(w.shape()) << " expects "
                                    << w.size(1);
  DPT_CHECK(!bias.defined() || bias.shape() == Shape{w.size(0)})
      << "linear: bias " << shape_str(bias.shape()) << " does not match weight " << shape_str(w.shape())
      << ": expected [" << w.size(0) << "]";
  MacCounter::add(x.size(0) * x.size(1) * w.size(0));
  return product("linear", x, w, true, bias, fuse_relu);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  op_device("matmul", {&a, &b});
  DPT_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0))
      << "matmul: shapes " << shape_str(a.shape()) << " and " << shape_str(b.shape())
      << " do not multiply (need [M, K] and [K, N])";
  return product("matmul", a, b, false, Tensor(), false);
}

}  // namespace dpt
