// Pooling ops: checks, then the device's kernels, which keep what their backward reads.
#include "ops/pool.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/device_check.h"

namespace dpt {
namespace {

// The output (and x's gradient) in x's dtype and layout: NCHW or channels-last.
Tensor pool2d(PoolKind kind, const char* name, const Tensor& x_in, int64_t kernel, int64_t stride,
              int64_t padding) {
  op_device_mixed(name, {&x_in});
  DPT_CHECK(x_in.dim() == 4) << name << ": input must be 4-D [N, C, H, W], got " << shape_str(x_in.shape());
  DPT_CHECK(kernel >= 1 && stride >= 1 && padding >= 0 && padding <= kernel / 2)
      << name << ": needs kernel >= 1, stride >= 1 and 0 <= padding <= kernel / 2; got kernel " << kernel
      << ", stride " << stride << ", padding " << padding;
  const Shape& xs = x_in.shape();
  int64_t oh = (xs[2] + 2 * padding - kernel) / stride + 1, ow = (xs[3] + 2 * padding - kernel) / stride + 1;
  DPT_CHECK(xs[2] + 2 * padding >= kernel && xs[3] + 2 * padding >= kernel)
      << name << ": input " << shape_str(xs) << " with padding " << padding << " is smaller than the "
      << kernel << "x" << kernel << " window";
  Shape out_shape{xs[0], xs[1], oh, ow};
  if (shape_numel(out_shape) == 0) return Tensor::empty(out_shape, x_in.dtype(), x_in.device());
  const Kernels& k = kernels_for(x_in.device());
  Tensor x = kernel_layout_on_device(x_in);
  Tensor out = empty_in_layout_of(out_shape, x.dtype(), x);
  PoolParams params{kernel, stride, padding};
  PoolSaved saved;
  k.pool2d_forward(kind, x, params, out, autograd::needs_recording({x_in}), saved);
  autograd::record(name, out, {x_in},
                   [&k, kind, saved, params, x_like = TensorLayout(x), out_like = TensorLayout(out)](
                       const Tensor& grad_out) {
                     Tensor grad_x = x_like.empty(x_like.dtype);
                     k.pool2d_backward(kind, saved, layout_like_on_device(grad_out, out_like), params, grad_x);
                     return std::vector<Tensor>{grad_x};
                   });
  return out;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return pool2d(PoolKind::max, "max_pool2d", x, kernel, stride, padding);
}

Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return pool2d(PoolKind::avg, "avg_pool2d", x, kernel, stride, padding);
}

// [N, C] out in x's dtype; x's gradient in x's layout.
Tensor global_avg_pool2d(const Tensor& x_in) {
  op_device_mixed("global_avg_pool2d", {&x_in});
  DPT_CHECK(x_in.dim() == 4 && x_in.size(2) > 0 && x_in.size(3) > 0)
      << "global_avg_pool2d: input must be 4-D [N, C, H, W] with H, W >= 1, got " << shape_str(x_in.shape());
  const Kernels& k = kernels_for(x_in.device());
  Tensor x = kernel_layout_on_device(x_in);
  Tensor out = Tensor::empty({x.size(0), x.size(1)}, x.dtype(), x.device());
  k.global_avg_pool2d_forward(x, out);
  autograd::record("global_avg_pool2d", out, {x_in}, [&k, x_like = TensorLayout(x)](const Tensor& grad_out) {
    Tensor grad_x = x_like.empty(x_like.dtype);
    k.global_avg_pool2d_backward(contiguous_on_device(grad_out), grad_x);
    return std::vector<Tensor>{grad_x};
  });
  return out;
}

}  // namespace dpt
