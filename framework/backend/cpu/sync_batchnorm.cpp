#include <cmath>

#include "backend/cpu/kernels.h"

namespace dpt::cpu {
namespace {

// Per-channel sums over N, H, W of f(k, ch) for the element offsets k of channel ch of a
// contiguous [N, C, H, W] tensor, in double, written to out[ch] as f32.
template <class F>
void channel_sums(const Shape& shape, F f, float* out) {
  int64_t n = shape[0], c = shape[1], hw = shape[2] * shape[3];
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0, k = (i * c + ch) * hw; j < hw; ++j, ++k) s += f(k, ch);
    out[ch] = static_cast<float>(s);
  }
}

// Calls f(k, ch) for every element offset k of a contiguous [N, C, H, W] tensor.
template <class F>
void each_element(const Shape& shape, F f) {
  int64_t c = shape[1], hw = shape[2] * shape[3], total = shape[0] * c * hw;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < total; ++k) f(k, (k / hw) % c);
}

}  // namespace

void sync_bn_sum(const Tensor& x, const Tensor& stats) {
  const float* p = x.data<float>();
  float* s = stats.data<float>();
  channel_sums(
      x.shape(), [&](int64_t k, int64_t) { return static_cast<double>(p[k]); }, s);
  s[x.size(1)] = static_cast<float>(x.size(0) * x.size(2) * x.size(3));
}

void sync_bn_sum_sq_dev(const Tensor& x, const Tensor& stats, const Tensor& sq) {
  const float* p = x.data<float>();
  const float* s = stats.data<float>();
  const double count = s[x.size(1)];
  channel_sums(
      x.shape(),
      [&](int64_t k, int64_t ch) {
        const double d = p[k] - s[ch] / count;
        return d * d;
      },
      sq.data<float>());
}

void sync_bn_finish_stats(const Tensor& stats, const Tensor& sq, float eps, float momentum,
                          const Tensor& running_mean, const Tensor& running_var, const Tensor& saved) {
  const int64_t c = sq.numel();
  const float* s = stats.data<float>();
  const double count = s[c];
  float* out = saved.data<float>();
  for (int64_t ch = 0; ch < c; ++ch) {
    const double mean = s[ch] / count, var = sq.data<float>()[ch] / count;
    out[ch] = static_cast<float>(mean);
    out[c + ch] = static_cast<float>(1.0 / std::sqrt(var + eps));
    if (running_mean.defined()) {
      float& rm = running_mean.data<float>()[ch];
      float& rv = running_var.data<float>()[ch];
      rm = (1 - momentum) * rm + momentum * static_cast<float>(mean);
      rv = (1 - momentum) * rv + momentum * static_cast<float>(var * count / (count - 1));
    }
  }
}

void sync_bn_normalize(const Tensor& x, const Tensor& saved, const Tensor& weight, const Tensor& bias,
                       const Tensor& xhat, const Tensor& out) {
  const int64_t c = x.size(1);
  const float* xp = x.data<float>();
  const float* st = saved.data<float>();
  const float* w = weight.data<float>();
  const float* b = bias.data<float>();
  float* xh = xhat.data<float>();
  float* o = out.data<float>();
  each_element(x.shape(), [&](int64_t k, int64_t ch) {
    xh[k] = (xp[k] - st[ch]) * st[c + ch];
    o[k] = xh[k] * w[ch] + b[ch];
  });
}

void sync_bn_grad_sums(const Tensor& grad_out, const Tensor& xhat, const Tensor& sums,
                       const Tensor& grad_bias, const Tensor& grad_weight) {
  const int64_t c = grad_out.size(1);
  const float* g = grad_out.data<float>();
  const float* xh = xhat.data<float>();
  float* s = sums.data<float>();
  channel_sums(
      grad_out.shape(), [&](int64_t k, int64_t) { return static_cast<double>(g[k]); }, s);
  channel_sums(
      grad_out.shape(), [&](int64_t k, int64_t) { return static_cast<double>(g[k]) * xh[k]; }, s + c);
  for (int64_t ch = 0; ch < c; ++ch) {
    grad_bias.data<float>()[ch] = s[ch];
    grad_weight.data<float>()[ch] = s[c + ch];
  }
}

void sync_bn_grad_input(const Tensor& grad_out, const Tensor& xhat, const Tensor& weight, const Tensor& saved,
                        const Tensor& stats, const Tensor& sums, const Tensor& grad_x) {
  const int64_t c = grad_out.size(1);
  const double count = stats.data<float>()[c];
  const float* g = grad_out.data<float>();
  const float* xh = xhat.data<float>();
  const float* w = weight.data<float>();
  const float* st = saved.data<float>();
  const float* s = sums.data<float>();
  float* gx = grad_x.data<float>();
  each_element(grad_out.shape(), [&](int64_t k, int64_t ch) {
    const double mean_dy = s[ch] / count, mean_dy_xhat = s[c + ch] / count;
    gx[k] = static_cast<float>(w[ch] * st[c + ch] * (g[k] - mean_dy - xh[k] * mean_dy_xhat));
  });
}

}  // namespace dpt::cpu
