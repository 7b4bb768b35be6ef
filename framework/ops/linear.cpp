// linear and matmul: checks, then matrix products on the inputs' device (oneDNN on CPU,
// cuBLAS on CUDA); the backward products read the saved operands transposed.
#include "ops/linear.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/device_check.h"
#include "ops/mac_count.h"

namespace dpt {
namespace {

void matmul_on(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& bias,
               bool relu, const Tensor& out) {
  kernels_for(out.device()).matmul(a, transpose_a, b, transpose_b, bias, relu, out);
}

}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in, bool fuse_relu) {
  Device device = op_device_mixed("linear", {&x_in, &w_in});
  DType dtype = x_in.dtype();
  DPT_CHECK(!bias_in.defined() || (bias_in.dtype() == DType::f32 && bias_in.device() == device))
      << "linear: bias must be f32 on " << device.str();
  DPT_CHECK(x_in.dim() == 2) << "linear: input must be 2-D [N, in], got " << shape_str(x_in.shape());
  DPT_CHECK(w_in.dim() == 2) << "linear: weight must be 2-D [out, in], got " << shape_str(w_in.shape());
  DPT_CHECK(x_in.size(1) == w_in.size(1))
      << "linear: input " << shape_str(x_in.shape()) << " has " << x_in.size(1) << " features but weight "
      << shape_str(w_in.shape()) << " expects " << w_in.size(1);
  if (bias_in.defined()) {
    DPT_CHECK(bias_in.shape() == Shape{w_in.size(0)})
        << "linear: bias " << shape_str(bias_in.shape()) << " does not match weight "
        << shape_str(w_in.shape()) << ": expected [" << w_in.size(0) << "]";
  }
  Tensor x = contiguous_on_device(x_in), w = contiguous_on_device(w_in);
  Tensor bias = bias_in.defined() ? contiguous_on_device(bias_in) : Tensor();
  Tensor out = Tensor::empty({x.size(0), w.size(0)}, dtype, device);
  if (out.numel() > 0) matmul_on(x, false, w, true, bias, fuse_relu, out);
  mac_count_add(x.size(0) * x.size(1) * w.size(0));

  bool need_x = x_in.requires_grad(), need_w = w_in.requires_grad();
  bool need_b = bias_in.defined() && bias_in.requires_grad();
  autograd::record("linear", out, {x_in, w_in, bias_in},
                   [x = need_w ? x.detach() : Tensor(), w = need_x ? w.detach() : Tensor(),
                    out = fuse_relu ? out.detach() : Tensor(), x_shape = x.shape(), w_shape = w.shape(),
                    device, dtype, need_x, need_w, need_b](const Tensor& grad_out) {
                     check_grad("linear backward", grad_out, device, dtype);
                     Tensor g = contiguous_on_device(grad_out);
                     if (out.defined()) {  // fused ReLU
                       Tensor masked = Tensor::empty(g.shape(), dtype, device);
                       kernels_for(device).relu_backward(out, g, masked);
                       g = masked;
                     }
                     std::vector<Tensor> grads(3);
                     if (need_x) {  // dL/dx = g w
                       grads[0] = Tensor::empty(x_shape, dtype, device);
                       matmul_on(g, false, w, false, Tensor(), false, grads[0]);
                     }
                     if (need_w) {  // dL/dw = g^T x
                       grads[1] = Tensor::empty(w_shape, dtype, device);
                       matmul_on(g, true, x, false, Tensor(), false, grads[1]);
                     }
                     if (need_b) {
                       grads[2] = Tensor::empty({w_shape[0]}, DType::f32, device);
                       kernels_for(device).sum_rows(g, grads[2]);
                     }
                     return grads;
                   });
  return out;
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  Device device = op_device("matmul", {&a_in, &b_in});
  DPT_CHECK(a_in.dim() == 2 && b_in.dim() == 2 && a_in.size(1) == b_in.size(0))
      << "matmul: shapes " << shape_str(a_in.shape()) << " and " << shape_str(b_in.shape())
      << " do not multiply (need [M, K] and [K, N])";
  Tensor a = contiguous_on_device(a_in), b = contiguous_on_device(b_in);
  Tensor out = Tensor::empty({a.size(0), b.size(1)}, DType::f32, device);
  if (out.numel() > 0) matmul_on(a, false, b, false, Tensor(), false, out);
  bool need_a = a_in.requires_grad(), need_b = b_in.requires_grad();
  autograd::record(
      "matmul", out, {a_in, b_in},
      [a = need_b ? a.detach() : Tensor(), b = need_a ? b.detach() : Tensor(), a_shape = a.shape(),
       b_shape = b.shape(), device, need_a, need_b](const Tensor& grad_out) {
        check_grad("matmul backward", grad_out, device);
        Tensor g = contiguous_on_device(grad_out);
        std::vector<Tensor> grads(2);
        if (need_a) {  // dL/da = g b^T
          grads[0] = Tensor::empty(a_shape, DType::f32, device);
          matmul_on(g, false, b, true, Tensor(), false, grads[0]);
        }
        if (need_b) {  // dL/db = a^T g
          grads[1] = Tensor::empty(b_shape, DType::f32, device);
          matmul_on(a, true, g, false, Tensor(), false, grads[1]);
        }
        return grads;
      });
  return out;
}

}  // namespace dpt
