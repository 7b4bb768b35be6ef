// shortcut_pad and its backward, side by side. Both are strided copies over whole
// (n, c) planes, too small a job for a oneDNN primitive, so plain loops do it here on
// CPU; backend/cuda/shortcut_pad.cu has the CUDA kernels.
#include "ops/shortcut_pad.h"

#include <cstring>

#include "autograd/node.h"
#include "ops/device_check.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/shortcut_pad.h"
#endif

namespace dpt {
namespace {

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

// Option A on channels-last input: channels-last output, and gradient, with no layout
// change (the residual add then runs on two channels-last tensors).
Tensor shortcut_pad_nhwc(const Tensor& x, int64_t out_channels, int64_t stride) {
  int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  int64_t oh = (h + stride - 1) / stride, ow = (w + stride - 1) / stride;
  Tensor out = Tensor::empty_channels_last({n, out_channels, oh, ow});
  subsample_nhwc(x.data<float>(), out.data<float>(), n, c, h, w, out_channels, oh, ow, stride);
  autograd::record("shortcut_pad", out, {x}, [x_shape = x.shape(), stride](const Tensor& grad_out) {
    check_grad("shortcut_pad backward", grad_out, Device::cpu());
    Tensor g = grad_out.channels_last();
    Tensor gx = Tensor::empty_channels_last(x_shape);
    scatter_nhwc(g.data<float>(), gx.data<float>(), x_shape[0], x_shape[1], x_shape[2], x_shape[3], g.size(1),
                 g.size(2), g.size(3), stride);
    return std::vector<Tensor>{gx};
  });
  return out;
}

#ifdef DPT_WITH_CUDA
// NCHW or channels-last, f32 or bf16: the output and the gradient keep x's.
Tensor shortcut_pad_cuda(const Tensor& x_in, int64_t out_channels, int64_t stride) {
  Tensor x = kernel_layout_on_device(x_in);
  bool nhwc = !x.is_contiguous();
  int64_t n = x.size(0), h = x.size(2), w = x.size(3);
  Shape out_shape{n, out_channels, (h + stride - 1) / stride, (w + stride - 1) / stride};
  Tensor out = nhwc ? Tensor::empty_channels_last(out_shape, x.dtype(), x.device())
                    : Tensor::empty(out_shape, x.dtype(), x.device());
  cuda::shortcut_pad_forward(x, stride, out);
  autograd::record("shortcut_pad", out, {x_in},
                   [x_layout = TensorLayout(x), out_layout = TensorLayout(out), stride](const Tensor& g) {
                     check_grad("shortcut_pad backward", g, x_layout.device, x_layout.dtype);
                     Tensor gx = x_layout.empty(x_layout.dtype);
                     cuda::shortcut_pad_backward(layout_like_on_device(g, out_layout), stride, gx);
                     return std::vector<Tensor>{gx};
                   });
  return out;
}
#endif

}  // namespace

Tensor shortcut_pad(const Tensor& x_in, int64_t out_channels, int64_t stride) {
  op_device_mixed("shortcut_pad", {&x_in});
  DPT_CHECK(x_in.dim() == 4) << "shortcut_pad: input must be 4-D [N, C, H, W], got "
                             << shape_str(x_in.shape());
  DPT_CHECK(stride >= 1) << "shortcut_pad: stride must be >= 1, got " << stride;
  DPT_CHECK(out_channels >= x_in.size(1))
      << "shortcut_pad: input " << shape_str(x_in.shape()) << " has " << x_in.size(1)
      << " channels, more than out_channels " << out_channels;
#ifdef DPT_WITH_CUDA
  if (x_in.device().is_cuda()) return shortcut_pad_cuda(x_in, out_channels, stride);
#endif
  if (x_in.is_channels_last()) return shortcut_pad_nhwc(x_in, out_channels, stride);
  Tensor x = x_in.contiguous();
  int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  int64_t oh = (h + stride - 1) / stride, ow = (w + stride - 1) / stride;
  Tensor out = Tensor::zeros({n, out_channels, oh, ow});
  strided_copy(x.data<float>(), out.data<float>(), n, c, h, w, out_channels, oh, ow, stride, true);

  autograd::record("shortcut_pad", out, {x_in}, [x_shape = x.shape(), stride](const Tensor& grad_out) {
    check_grad("shortcut_pad backward", grad_out, Device::cpu());
    Tensor g = grad_out.contiguous();
    Tensor gx = Tensor::empty(x_shape);
    strided_copy(gx.data<float>(), g.data<float>(), x_shape[0], x_shape[1], x_shape[2], x_shape[3], g.size(1),
                 g.size(2), g.size(3), stride, false);
    return std::vector<Tensor>{gx};
  });
  return out;
}

}  // namespace dpt
