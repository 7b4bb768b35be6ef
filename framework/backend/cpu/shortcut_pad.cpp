#include <cstring>

#include "backend/cpu/kernels.h"

namespace dpt::cpu {
namespace {

bool nhwc(const Tensor& t) { return t.is_channels_last() && !t.is_contiguous(); }

// For every (n, c < C) plane: sub[oh, ow] = full[oh * stride, ow * stride] when
// to_sub, else full[oh * stride, ow * stride] = sub[oh, ow] (full is zeroed first).
// `full` is [N, C, H, W]; `sub` is [N, sub_c, OH, OW] with sub_c >= C, both contiguous.
void strided_copy(float* full, float* sub, int64_t n, int64_t c, int64_t h, int64_t w, int64_t sub_c,
                  int64_t oh, int64_t ow, int64_t stride, bool to_sub) {
#pragma omp parallel for schedule(static) if (n * c * h * w > 32768)
  for (int64_t plane = 0; plane < n * c; ++plane) {
    int64_t i = plane / c, ch = plane % c;
    float* f = full + plane * h * w;
    float* s = sub + (i * sub_c + ch) * oh * ow;
    if (!to_sub) std::memset(f, 0, sizeof(float) * h * w);
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        if (to_sub) {
          s[y * ow + x] = f[y * stride * w + x * stride];
        } else {
          f[y * stride * w + x * stride] = s[y * ow + x];
        }
      }
    }
  }
}

// Channels-last forward: out[i, y, x, :c] = in[i, y * stride, x * stride, :] and
// out[i, y, x, c:] = 0. `in` is [N, H, W, C] and `out` [N, OH, OW, out_c] in memory.
void subsample_nhwc(const float* in, float* out, int64_t n, int64_t c, int64_t h, int64_t w, int64_t out_c,
                    int64_t oh, int64_t ow, int64_t stride) {
#pragma omp parallel for schedule(static) if (n * out_c * oh * ow > 32768)
  for (int64_t row = 0; row < n * oh; ++row) {
    int64_t i = row / oh, y = row % oh;
    for (int64_t x = 0; x < ow; ++x) {
      float* dst = out + (row * ow + x) * out_c;
      std::memcpy(dst, in + ((i * h + y * stride) * w + x * stride) * c, sizeof(float) * c);
      std::memset(dst + c, 0, sizeof(float) * (out_c - c));
    }
  }
}

// Channels-last backward: grad_x[i, y, x, :] = grad_out[i, y / stride, x / stride, :c]
// where y and x are multiples of stride, else 0.
void scatter_nhwc(const float* grad_out, float* grad_x, int64_t n, int64_t c, int64_t h, int64_t w,
                  int64_t out_c, int64_t oh, int64_t ow, int64_t stride) {
#pragma omp parallel for schedule(static) if (n * c * h * w > 32768)
  for (int64_t row = 0; row < n * h; ++row) {
    int64_t i = row / h, y = row % h;
    for (int64_t x = 0; x < w; ++x) {
      float* dst = grad_x + (row * w + x) * c;
      if (y % stride == 0 && x % stride == 0)
        std::memcpy(dst, grad_out + ((i * oh + y / stride) * ow + x / stride) * out_c, sizeof(float) * c);
      else
        std::memset(dst, 0, sizeof(float) * c);
    }
  }
}

}  // namespace

void shortcut_pad_forward(const Tensor& x, int64_t stride, const Tensor& out) {
  int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  int64_t out_c = out.size(1), oh = out.size(2), ow = out.size(3);
  if (nhwc(out)) {
    Tensor in = x.channels_last();
    return subsample_nhwc(in.data<float>(), out.data<float>(), n, c, h, w, out_c, oh, ow, stride);
  }
  Tensor in = x.contiguous();
  out.zero_();
  strided_copy(in.data<float>(), out.data<float>(), n, c, h, w, out_c, oh, ow, stride, true);
}

void shortcut_pad_backward(const Tensor& grad_out, int64_t stride, const Tensor& grad_x) {
  int64_t n = grad_x.size(0), c = grad_x.size(1), h = grad_x.size(2), w = grad_x.size(3);
  int64_t out_c = grad_out.size(1), oh = grad_out.size(2), ow = grad_out.size(3);
  if (nhwc(grad_x)) {
    Tensor g = grad_out.channels_last();
    return scatter_nhwc(g.data<float>(), grad_x.data<float>(), n, c, h, w, out_c, oh, ow, stride);
  }
  Tensor g = grad_out.contiguous();
  strided_copy(grad_x.data<float>(), g.data<float>(), n, c, h, w, out_c, oh, ow, stride, false);
}

}  // namespace dpt::cpu
