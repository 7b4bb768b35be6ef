// shortcut_pad kernels (see kernel_list.h): one thread per element written, so every
// output element is set, zeros included, with no separate memset. f32 or bf16, NCHW or
// NHWC: each thread decodes its element's (n, c, y, x) in the layout and reads the one
// element it copies.
#include <type_traits>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/layout.h"
#include "backend/cuda/strided.h"

namespace dpt::cuda {
namespace {

struct Sizes {
  int64_t c, h, w;     // x
  int64_t oc, oh, ow;  // out
  int64_t stride;
};

// out[n, ch, yo, xo] = x[n, ch, yo * stride, xo * stride] for ch < c, else 0.
template <class T, bool nhwc>
__global__ void subsample_kernel(const T* x, T* out, int64_t total, Sizes s) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    Index4 o = index4_of<nhwc>(i, s.oc, s.oh, s.ow);
    out[i] = o.c < s.c ? x[offset4<nhwc>({o.n, o.c, o.y * s.stride, o.x * s.stride}, s.c, s.h, s.w)]
                       : from_float<T>(0.0f);
  }
}

// grad_x[n, ch, y, x] = grad_out[n, ch, y / stride, x / stride] where both divide, else 0.
template <class T, bool nhwc>
__global__ void scatter_kernel(const T* grad_out, T* grad_x, int64_t total, Sizes s) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    Index4 e = index4_of<nhwc>(i, s.c, s.h, s.w);
    grad_x[i] = e.y % s.stride == 0 && e.x % s.stride == 0
                    ? grad_out[offset4<nhwc>({e.n, e.c, e.y / s.stride, e.x / s.stride}, s.oc, s.oh, s.ow)]
                    : from_float<T>(0.0f);
  }
}

// Both tensors 4-D, of one dtype and layout; returns whether that layout is NHWC.
bool check(const Tensor& full, const Tensor& sub) {
  DPT_CHECK(full.dim() == 4 && sub.dim() == 4 && full.dtype() == sub.dtype())
      << "shortcut_pad on cuda: needs 4-D tensors of one dtype";
  // The layout of whichever tensor tells (one may be both, e.g. a 1x1 map).
  bool nhwc = layout_nhwc(full, "shortcut_pad") || layout_nhwc(sub, "shortcut_pad");
  DPT_CHECK(has_layout(full, nhwc) && has_layout(sub, nhwc))
      << "shortcut_pad on cuda: needs tensors of one layout";
  return nhwc;
}

Sizes sizes_of(const Tensor& x, const Tensor& out, int64_t stride) {
  return {x.size(1), x.size(2), x.size(3), out.size(1), out.size(2), out.size(3), stride};
}

}  // namespace

void shortcut_pad_forward(const Tensor& x, int64_t stride, const Tensor& out) {
  bool nhwc = check(x, out);
  int64_t total = out.numel();
  Sizes s = sizes_of(x, out, stride);
  launch_typed(out.device().index, x.dtype(), "shortcut_pad", total, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    dispatch_bool(nhwc, [&](auto layout) {
      subsample_kernel<T, decltype(layout)::value>
          <<<grid_for(total), kBlock, 0, stream>>>(elements<T>(x), elements<T>(out), total, s);
    });
  });
}

void shortcut_pad_backward(const Tensor& grad_out, int64_t stride, const Tensor& grad_x) {
  bool nhwc = check(grad_x, grad_out);
  int64_t total = grad_x.numel();
  Sizes s = sizes_of(grad_x, grad_out, stride);
  launch_typed(
      grad_x.device().index, grad_x.dtype(), "shortcut_pad", total, [&](auto tag, cudaStream_t stream) {
        using T = decltype(tag);
        dispatch_bool(nhwc, [&](auto layout) {
          scatter_kernel<T, decltype(layout)::value>
              <<<grid_for(total), kBlock, 0, stream>>>(elements<T>(grad_out), elements<T>(grad_x), total, s);
        });
      });
}

}  // namespace dpt::cuda
