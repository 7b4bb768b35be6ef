#include "ops/sync_batch_norm.h"

#include <cmath>
#include <vector>

#include "autograd/node.h"
#include "ops/cast.h"
#include "ops/device_check.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/sync_batchnorm.h"
#endif

namespace dpt {
namespace {

// Per-channel sums over N, H, W of f(x[n, c, hw]) for a contiguous NCHW tensor, in double.
template <class F>
std::vector<double> channel_sums(const Tensor& x, F f) {
  int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  const float* p = x.data<float>();
  std::vector<double> out(c, 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float* row = p + (i * c + ch) * hw;
      for (int64_t j = 0; j < hw; ++j) s += f(row[j], ch, i * c * hw + ch * hw + j);
    }
    out[ch] = s;
  }
  return out;
}

// Sums `values` across ranks through an f32 tensor (the collectives carry f32).
std::vector<double> sum_across(const std::vector<double>& values, const SumAcrossRanks& sum) {
  std::vector<float> f(values.begin(), values.end());
  Tensor t = Tensor::from_vector(f, {static_cast<int64_t>(f.size())});
  sum(t);
  std::vector<float> back = t.to_vector();
  return std::vector<double>(back.begin(), back.end());
}

#ifdef DPT_WITH_CUDA
// The same steps as the CPU path below, with the sums as CUDA kernels and the cross-rank
// sums on device tensors (NCCL through the process group): nothing waits for the GPU,
// except a read-back of the global count when this rank alone has at most one value per
// channel.
Tensor sync_batch_norm2d_cuda(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                              const Tensor& running_mean, const Tensor& running_var,
                              const BatchNormOptions& options, const SumAcrossRanks& sum) {
  Tensor x = contiguous_on_device(x_in);
  const Device device = x.device();
  const int64_t c = x.size(1);
  for (const Tensor* t : {&running_mean, &running_var})
    DPT_CHECK(!t->defined() || (t->device() == device && t->is_contiguous() && t->numel() == c))
        << "sync_batch_norm2d: running statistics must be contiguous [" << c << "] on " << device.str();
  Tensor stats = Tensor::empty({c + 1}, DType::f32, device);
  cuda::sync_bn_sum(x, stats);
  sum(stats);
  if (x.size(0) * x.size(2) * x.size(3) <= 1) {
    const float count = stats.to_vector()[c];
    DPT_CHECK(count > 1) << "sync_batch_norm2d: needs more than one value per channel over all ranks";
  }
  Tensor sq = Tensor::empty({c}, DType::f32, device);
  cuda::sync_bn_sum_sq_dev(x, stats, sq);
  sum(sq);
  Tensor saved = Tensor::empty({2 * c}, DType::f32, device);  // mean, invstd
  cuda::sync_bn_finish_stats(stats, sq, options.eps, options.momentum, running_mean, running_var, saved);
  Tensor xhat = Tensor::empty(x.shape(), DType::f32, device);
  Tensor out = Tensor::empty(x.shape(), DType::f32, device);
  Tensor w = contiguous_on_device(weight.detach()), b = contiguous_on_device(bias.detach());
  cuda::sync_bn_normalize(x, saved, w, b, xhat, out);

  autograd::record("sync_batch_norm2d", out, {x_in, weight, bias},
                   [xhat, w, saved, stats, sum, c, device](const Tensor& g_in) {
                     check_grad("sync_batch_norm2d backward", g_in, device);
                     Tensor g = contiguous_on_device(g_in);
                     Tensor sums = Tensor::empty({2 * c}, DType::f32, device);
                     Tensor gw = Tensor::empty({c}, DType::f32, device),
                            gb = Tensor::empty({c}, DType::f32, device);
                     cuda::sync_bn_grad_sums(g, xhat, sums, gb, gw);
                     sum(sums);
                     Tensor gx = Tensor::empty(g.shape(), DType::f32, device);
                     cuda::sync_bn_grad_input(g, xhat, w, saved, stats, sums, gx);
                     return std::vector<Tensor>{gx, gw, gb};
                   });
  return out;
}
#endif

}  // namespace

Tensor sync_batch_norm2d(const Tensor& x_in, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                         const Tensor& running_var, const BatchNormOptions& options, const SumAcrossRanks& sum) {
  [[maybe_unused]] const Device device = op_device_mixed("sync_batch_norm2d", {&x_in});
  op_device("sync_batch_norm2d", {&weight, &bias});
  DPT_CHECK(weight.device() == device)
      << "sync_batch_norm2d: inputs on different devices (" << device.str() << " and " << weight.device().str()
      << "); move them to one device first";
  DPT_CHECK(x_in.dim() == 4 && weight.numel() == x_in.size(1) && bias.numel() == x_in.size(1))
      << "sync_batch_norm2d: expected x [N, C, H, W] with weight and bias [C], got " << shape_str(x_in.shape())
      << ", " << shape_str(weight.shape());
#ifdef DPT_WITH_CUDA
  if (device.is_cuda() && x_in.dtype() == DType::f32 && x_in.is_contiguous())
    return sync_batch_norm2d_cuda(x_in, weight, bias, running_mean, running_var, options, sum);
  if (device.is_cuda()) {
    // bf16 or channels-last activations (precision, channels_last: nn/compute.h): the
    // statistics are f32 NCHW sums either way, so the input is cast to that and the output
    // back to the input's dtype and layout; the casts carry the gradient back the same way.
    Tensor y = sync_batch_norm2d_cuda(cast(x_in, DType::f32, MemoryFormat::contiguous), weight, bias, running_mean,
                                      running_var, options, sum);
    return cast(y, x_in.dtype(), x_in.is_channels_last() ? MemoryFormat::channels_last : MemoryFormat::contiguous);
  }
#endif
  Tensor x = x_in.contiguous();
  int64_t c = x.size(1), hw = x.size(2) * x.size(3);
  // Count, then mean, then variance around the global mean: two passes, no cancellation.
  std::vector<double> count_sum = channel_sums(x, [](float v, int64_t, int64_t) { return static_cast<double>(v); });
  count_sum.push_back(static_cast<double>(x.size(0) * hw));
  count_sum = sum_across(count_sum, sum);
  double count = count_sum[c];
  DPT_CHECK(count > 1) << "sync_batch_norm2d: needs more than one value per channel over all ranks";
  std::vector<double> mean(count_sum.begin(), count_sum.begin() + c);
  for (double& m : mean) m /= count;
  std::vector<double> var = sum_across(
      channel_sums(x, [&](float v, int64_t ch, int64_t) { return (v - mean[ch]) * (v - mean[ch]); }), sum);
  for (double& v : var) v /= count;

  std::vector<float> invstd(c);
  for (int64_t ch = 0; ch < c; ++ch) invstd[ch] = static_cast<float>(1.0 / std::sqrt(var[ch] + options.eps));
  if (running_mean.defined()) {
    float* rm = running_mean.data<float>();
    float* rv = running_var.data<float>();
    for (int64_t ch = 0; ch < c; ++ch) {
      rm[ch] = (1 - options.momentum) * rm[ch] + options.momentum * static_cast<float>(mean[ch]);
      rv[ch] = (1 - options.momentum) * rv[ch] + options.momentum * static_cast<float>(var[ch] * count / (count - 1));
    }
  }

  Tensor xhat = Tensor::empty(x.shape());
  Tensor out = Tensor::empty(x.shape());
  {
    const float* xp = x.data<float>();
    const float* w = weight.data<float>();
    const float* b = bias.data<float>();
    float* xh = xhat.data<float>();
    float* o = out.data<float>();
    int64_t total = x.numel();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < total; ++i) {
      int64_t ch = (i / hw) % c;
      xh[i] = (xp[i] - static_cast<float>(mean[ch])) * invstd[ch];
      o[i] = xh[i] * w[ch] + b[ch];
    }
  }

  autograd::record("sync_batch_norm2d", out, {x_in, weight, bias},
                   [xhat, weight = weight.detach(), invstd, count, sum, c, hw](const Tensor& g_in) {
                     Tensor g = g_in.contiguous();
                     const float* gp = g.data<float>();
                     std::vector<double> local_dy =
                         channel_sums(g, [](float v, int64_t, int64_t) { return static_cast<double>(v); });
                     const float* xh = xhat.data<float>();
                     std::vector<double> local_dy_xhat = channel_sums(
                         g, [&](float v, int64_t, int64_t i) { return static_cast<double>(v) * xh[i]; });
                     // Parameter gradients are this rank's share (DDP averages them);
                     // the input gradient needs the sums over every rank.
                     std::vector<double> both = local_dy;
                     both.insert(both.end(), local_dy_xhat.begin(), local_dy_xhat.end());
                     both = sum_across(both, sum);
                     Tensor gx = Tensor::empty(g.shape()), gw = Tensor::empty({c}), gb = Tensor::empty({c});
                     for (int64_t ch = 0; ch < c; ++ch) {
                       gw.data<float>()[ch] = static_cast<float>(local_dy_xhat[ch]);
                       gb.data<float>()[ch] = static_cast<float>(local_dy[ch]);
                     }
                     const float* w = weight.data<float>();
                     float* gxp = gx.data<float>();
                     int64_t total = g.numel();
#pragma omp parallel for schedule(static)
                     for (int64_t i = 0; i < total; ++i) {
                       int64_t ch = (i / hw) % c;
                       double mean_dy = both[ch] / count, mean_dy_xhat = both[c + ch] / count;
                       gxp[i] = static_cast<float>(w[ch] * invstd[ch] * (gp[i] - mean_dy - xh[i] * mean_dy_xhat));
                     }
                     return std::vector<Tensor>{gx, gw, gb};
                   });
  return out;
}

}  // namespace dpt
