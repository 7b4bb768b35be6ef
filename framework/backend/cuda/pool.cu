// cuDNN pooling and the global-average kernels (see kernel_list.h). Max pooling uses cuDNN's
// deterministic mode, so a run's gradients do not depend on the order atomics land in.
// bf16 and channels-last tensors go through the window kernels here instead (cuDNN's
// legacy pooling is f32 NCHW in this backend); their backward gathers, per input element,
// from the windows that contain it, so it needs no atomics either.
#include <type_traits>

#include "backend/cuda/cudnn_desc.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/layout.h"
#include "backend/cuda/strided.h"

namespace dpt::cuda {
namespace {

constexpr int kPlanesPerBlock = kBlock / kWarp;

// NCHW: one warp per (n, c) plane.
template <class T>
__global__ void global_avg_forward_kernel(const T* x, T* out, int64_t planes, int64_t hw) {
  int lane = threadIdx.x % kWarp;
  for (int64_t plane = static_cast<int64_t>(blockIdx.x) * kPlanesPerBlock + threadIdx.x / kWarp;
       plane < planes; plane += static_cast<int64_t>(gridDim.x) * kPlanesPerBlock) {
    double s = 0;
    for (int64_t j = lane; j < hw; j += kWarp) s += to_float(x[plane * hw + j]);
    s = warp_sum(s);
    if (lane == 0) out[plane] = from_float<T>(static_cast<float>(s / static_cast<double>(hw)));
  }
}

// NHWC: one thread per (n, c); neighbouring threads read neighbouring channels.
template <class T>
__global__ void global_avg_forward_nhwc_kernel(const T* x, T* out, int64_t planes, int64_t c, int64_t hw) {
  for (int64_t p = thread_index(); p < planes; p += thread_count()) {
    const T* base = x + (p / c) * hw * c + p % c;
    double s = 0;
    for (int64_t j = 0; j < hw; ++j) s += to_float(base[j * c]);
    out[p] = from_float<T>(static_cast<float>(s / static_cast<double>(hw)));
  }
}

template <class T, bool nhwc>
__global__ void global_avg_backward_kernel(const T* grad_out, T* grad_x, int64_t total, int64_t c,
                                           int64_t hw) {
  const float inv = 1.0f / static_cast<float>(hw);
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    int64_t plane = nhwc ? (i / (hw * c)) * c + i % c : i / hw;
    grad_x[i] = from_float<T>(to_float(grad_out[plane]) * inv);
  }
}

// Window kernels for bf16 and channels-last (any mix); x [N, C, H, W], out [N, C, OH, OW].
struct Window {
  int64_t c, h, w, oh, ow, kernel, stride, padding;
};

// The first maximum of output (n, c, oy, ox)'s window in row-major scan order, as an
// offset into x; padding never wins. -1 for a window wholly in the padding (not reached:
// the op requires padding <= kernel / 2).
template <class T, bool nhwc>
__device__ int64_t window_argmax(const T* x, Index4 o, const Window& p) {
  int64_t best = -1;
  float best_value = 0.0f;
  for (int64_t dy = 0; dy < p.kernel; ++dy) {
    int64_t y = o.y * p.stride - p.padding + dy;
    if (y < 0 || y >= p.h) continue;
    for (int64_t dx = 0; dx < p.kernel; ++dx) {
      int64_t xx = o.x * p.stride - p.padding + dx;
      if (xx < 0 || xx >= p.w) continue;
      int64_t k = offset4<nhwc>({o.n, o.c, y, xx}, p.c, p.h, p.w);
      float v = to_float(x[k]);
      if (best < 0 || v > best_value) {
        best = k;
        best_value = v;
      }
    }
  }
  return best;
}

template <class T, bool nhwc, bool is_max>
__global__ void pool_forward_kernel(const T* x, T* out, int64_t total, Window p) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    Index4 o = index4_of<nhwc>(i, p.c, p.oh, p.ow);
    if constexpr (is_max) {
      int64_t k = window_argmax<T, nhwc>(x, o, p);
      out[i] = k < 0 ? from_float<T>(0.0f) : x[k];
    } else {
      float s = 0.0f;
      for (int64_t dy = 0; dy < p.kernel; ++dy) {
        int64_t y = o.y * p.stride - p.padding + dy;
        if (y < 0 || y >= p.h) continue;
        for (int64_t dx = 0; dx < p.kernel; ++dx) {
          int64_t xx = o.x * p.stride - p.padding + dx;
          if (xx >= 0 && xx < p.w) s += to_float(x[offset4<nhwc>({o.n, o.c, y, xx}, p.c, p.h, p.w)]);
        }
      }
      out[i] = from_float<T>(s / static_cast<float>(p.kernel * p.kernel));
    }
  }
}

// Input element (n, c, y, x) lies in the windows oy in [ceil((y + pad - k + 1) / s), (y + pad) / s].
template <class T, bool nhwc, bool is_max>
__global__ void pool_backward_kernel(const T* x, const T* grad_out, T* grad_x, int64_t total, Window p) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    Index4 e = index4_of<nhwc>(i, p.c, p.h, p.w);
    int64_t y_low = e.y + p.padding - p.kernel + 1, x_low = e.x + p.padding - p.kernel + 1;
    int64_t oy0 = y_low <= 0 ? 0 : (y_low + p.stride - 1) / p.stride;
    int64_t ox0 = x_low <= 0 ? 0 : (x_low + p.stride - 1) / p.stride;
    int64_t oy1 = min(p.oh - 1, (e.y + p.padding) / p.stride),
            ox1 = min(p.ow - 1, (e.x + p.padding) / p.stride);
    float g = 0.0f;
    for (int64_t oy = oy0; oy <= oy1; ++oy)
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        Index4 o{e.n, e.c, oy, ox};
        float go = to_float(grad_out[offset4<nhwc>(o, p.c, p.oh, p.ow)]);
        if constexpr (is_max) {
          if (window_argmax<T, nhwc>(x, o, p) == i) g += go;
        } else {
          g += go;
        }
      }
    grad_x[i] = from_float<T>(is_max ? g : g / static_cast<float>(p.kernel * p.kernel));
  }
}

bool pool_uses_cudnn(const Tensor& x) { return x.dtype() == DType::f32 && x.is_contiguous(); }

Window window_of(const Tensor& x, const Tensor& out, const PoolParams& p) {
  return {x.size(1), x.size(2), x.size(3), out.size(2), out.size(3), p.kernel, p.stride, p.padding};
}

// Launches over `total` elements: f(T{}, stream, std::bool_constant<nhwc>{}, std::bool_constant<max>{}).
template <class F>
void launch_pool(PoolKind kind, const Tensor& x, bool nhwc, int64_t total, F&& f) {
  launch_typed(x.device().index, x.dtype(), "pool2d", total, [&](auto tag, cudaStream_t stream) {
    dispatch_bool(nhwc, [&](auto layout) {
      dispatch_bool(kind == PoolKind::max, [&](auto is_max) { f(tag, stream, layout, is_max); });
    });
  });
}

void check_alike(std::initializer_list<const Tensor*> tensors, const Tensor& ref, bool nhwc) {
  for (const Tensor* t : tensors)
    DPT_CHECK(t->dim() == 4 && t->dtype() == ref.dtype() && has_layout(*t, nhwc))
        << "pool2d on cuda: every tensor needs the input's dtype and layout";
}

cudnnPoolingMode_t mode_of(PoolKind kind) {
  return kind == PoolKind::max ? CUDNN_POOLING_MAX_DETERMINISTIC
                               : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
}

void check_contiguous(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    DPT_CHECK(t->dim() == 4 && t->is_contiguous())
        << "pool2d on cuda: needs contiguous NCHW tensors, got " << shape_str(t->shape());
}

// Requires: x [N, C, H, W], out [N, C, OH, OW], OH = (H + 2 padding - kernel) / stride + 1.
void pool2d_forward(PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out) {
  if (!pool_uses_cudnn(x)) {
    bool nhwc = layout_nhwc(x, "pool2d");
    check_alike({&out}, x, nhwc);
    int64_t total = out.numel();
    Window w = window_of(x, out, p);
    launch_pool(kind, x, nhwc, total, [&](auto tag, cudaStream_t stream, auto layout, auto is_max) {
      using T = decltype(tag);
      pool_forward_kernel<T, decltype(layout)::value, decltype(is_max)::value>
          <<<grid_for(total), kBlock, 0, stream>>>(elements<T>(x), elements<T>(out), total, w);
    });
    return;
  }
  check_contiguous({&x, &out});
  if (out.numel() == 0) return;
  int device = x.device().index;
  DeviceGuard guard(device);
  PoolingDescriptor pool(mode_of(kind), p.kernel, p.stride, p.padding);
  TensorDescriptor xd(x.shape(), "pool2d"), yd(out.shape(), "pool2d");
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnPoolingForward(device_context(device).cudnn(), pool.get(), &one, xd.get(), x.data<float>(),
                                  &zero, yd.get(), out.data<float>()));
}

// Requires: the forward's x and out (max pooling finds its argmax again from them), grad_out
// like out, grad_x like x. On ties the gradient goes to one of the maxima.
void pool2d_backward(PoolKind kind, const Tensor& x, const Tensor& out, const Tensor& grad_out,
                     const PoolParams& p, const Tensor& grad_x) {
  if (!pool_uses_cudnn(x)) {
    bool nhwc = layout_nhwc(x, "pool2d");
    check_alike({&out, &grad_out, &grad_x}, x, nhwc);
    int64_t total = grad_x.numel();
    Window w = window_of(x, out, p);
    launch_pool(kind, x, nhwc, total, [&](auto tag, cudaStream_t stream, auto layout, auto is_max) {
      using T = decltype(tag);
      pool_backward_kernel<T, decltype(layout)::value, decltype(is_max)::value>
          <<<grid_for(total), kBlock, 0, stream>>>(elements<T>(x), elements<T>(grad_out), elements<T>(grad_x),
                                                   total, w);
    });
    return;
  }
  check_contiguous({&x, &out, &grad_out, &grad_x});
  if (grad_x.numel() == 0) return;
  int device = x.device().index;
  DeviceGuard guard(device);
  PoolingDescriptor pool(mode_of(kind), p.kernel, p.stride, p.padding);
  TensorDescriptor xd(x.shape(), "pool2d"), yd(out.shape(), "pool2d");
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnPoolingBackward(device_context(device).cudnn(), pool.get(), &one, yd.get(),
                                   out.data<float>(), yd.get(), grad_out.data<float>(), xd.get(),
                                   x.data<float>(), &zero, xd.get(), grad_x.data<float>()));
}

}  // namespace

void global_avg_pool2d_forward(const Tensor& x, const Tensor& out) {
  bool nhwc = layout_nhwc(x, "global_avg_pool2d");
  DPT_CHECK(out.is_contiguous() && out.dtype() == x.dtype())
      << "global_avg_pool2d on cuda: the output must be contiguous, of the input's dtype";
  int64_t c = x.size(1), planes = x.size(0) * c, hw = x.size(2) * x.size(3);
  if (planes == 0) return;
  KernelScope scope(x.device().index);
  dispatch_float(x.dtype(), "global_avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    if (nhwc)
      global_avg_forward_nhwc_kernel<<<grid_for(planes), kBlock, 0, scope.stream()>>>(
          elements<T>(x), elements<T>(out), planes, c, hw);
    else
      global_avg_forward_kernel<<<grid_for(planes, kPlanesPerBlock), kBlock, 0, scope.stream()>>>(
          elements<T>(x), elements<T>(out), planes, hw);
  });
  DPT_CUDA_LAUNCH_CHECK();
}

void global_avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x) {
  bool nhwc = layout_nhwc(grad_x, "global_avg_pool2d");
  DPT_CHECK(grad_out.is_contiguous() && grad_out.dtype() == grad_x.dtype())
      << "global_avg_pool2d on cuda: the output gradient must be contiguous, of the input's dtype";
  int64_t total = grad_x.numel(), c = grad_x.size(1), hw = grad_x.size(2) * grad_x.size(3);
  launch_typed(
      grad_x.device().index, grad_x.dtype(), "global_avg_pool2d", total, [&](auto tag, cudaStream_t stream) {
        using T = decltype(tag);
        dispatch_bool(nhwc, [&](auto layout) {
          global_avg_backward_kernel<T, decltype(layout)::value><<<grid_for(total), kBlock, 0, stream>>>(
              elements<T>(grad_out), elements<T>(grad_x), total, c, hw);
        });
      });
}

// cuDNN's pooling backward rereads the input and the output.
void pool2d_forward(PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out,
                    bool keep_for_backward, PoolSaved& saved) {
  pool2d_forward(kind, x, p, out);
  if (keep_for_backward) saved = {x.detach(), out.detach(), Tensor()};
}

void pool2d_backward(PoolKind kind, const PoolSaved& saved, const Tensor& grad_out, const PoolParams& p,
                     const Tensor& grad_x) {
  pool2d_backward(kind, saved.x, saved.out, grad_out, p, grad_x);
}

}  // namespace dpt::cuda
