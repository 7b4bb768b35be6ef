// shortcut_pad kernels (see shortcut_pad.h): one thread per element written, so every
// output element is set, zeros included, with no separate memset.
#include "backend/cuda/shortcut_pad.h"

#include "backend/cuda/launch.h"

namespace dpt::cuda {
namespace {

// out [n, oc, oh, ow]; x [n, c, h, w].
__global__ void subsample_kernel(const float* x, float* out, int64_t total, int64_t c, int64_t h, int64_t w,
                                 int64_t oc, int64_t oh, int64_t ow, int64_t stride) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    int64_t xo = i % ow, yo = (i / ow) % oh, ch = (i / (ow * oh)) % oc, img = i / (ow * oh * oc);
    out[i] = ch < c ? x[((img * c + ch) * h + yo * stride) * w + xo * stride] : 0.0f;
  }
}

// grad_x [n, c, h, w]; grad_out [n, oc, oh, ow].
__global__ void scatter_kernel(const float* grad_out, float* grad_x, int64_t total, int64_t c, int64_t h,
                               int64_t w, int64_t oc, int64_t oh, int64_t ow, int64_t stride) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    int64_t x = i % w, y = (i / w) % h, ch = (i / (w * h)) % c, img = i / (w * h * c);
    grad_x[i] = y % stride == 0 && x % stride == 0
                    ? grad_out[((img * oc + ch) * oh + y / stride) * ow + x / stride]
                    : 0.0f;
  }
}

void check(const Tensor& full, const Tensor& sub) {
  DPT_CHECK(full.is_contiguous() && sub.is_contiguous() && full.dim() == 4 && sub.dim() == 4)
      << "shortcut_pad on cuda: needs contiguous 4-D tensors";
}

}  // namespace

void shortcut_pad_forward(const Tensor& x, int64_t stride, const Tensor& out) {
  check(x, out);
  int64_t total = out.numel();
  if (total == 0) return;
  KernelScope scope(out.device().index);
  subsample_kernel<<<grid_for(total), kBlock, 0, scope.stream()>>>(
      x.data<float>(), out.data<float>(), total, x.size(1), x.size(2), x.size(3), out.size(1), out.size(2),
      out.size(3), stride);
  DPT_CUDA_LAUNCH_CHECK();
}

void shortcut_pad_backward(const Tensor& grad_out, int64_t stride, const Tensor& grad_x) {
  check(grad_x, grad_out);
  int64_t total = grad_x.numel();
  if (total == 0) return;
  KernelScope scope(grad_x.device().index);
  scatter_kernel<<<grid_for(total), kBlock, 0, scope.stream()>>>(
      grad_out.data<float>(), grad_x.data<float>(), total, grad_x.size(1), grad_x.size(2), grad_x.size(3),
      grad_out.size(1), grad_out.size(2), grad_out.size(3), stride);
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace dpt::cuda
