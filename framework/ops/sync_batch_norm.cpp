// sync_batch_norm2d: per-channel sums on this rank, summed across ranks, then the next
// pass: two rounds in the forward (count and sums, then squared deviations around the
// global mean: no cancellation) and one in the backward.
#include "ops/sync_batch_norm.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/cast.h"
#include "ops/device_check.h"

namespace dpt {
namespace {

// x contiguous NCHW f32.
Tensor sync_batch_norm2d_f32(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                             const Tensor& running_mean, const Tensor& running_var, const BatchNormOptions& options,
                             const SumAcrossRanks& sum) {
  Tensor x = contiguous_on_device(x_in);
  const Device device = x.device();
  const Kernels& k = kernels_for(device);
  const int64_t c = x.size(1);
  for (const Tensor* t : {&running_mean, &running_var})
    DPT_CHECK(!t->defined() || (t->device() == device && t->is_contiguous() && t->numel() == c))
        << "sync_batch_norm2d: running statistics must be contiguous [" << c << "] on " << device.str();
  Tensor stats = Tensor::empty({c + 1}, DType::f32, device);  // per-channel sums, then the count
  k.sync_bn_sum(x, stats);
  sum(stats);
  if (x.size(0) * x.size(2) * x.size(3) <= 1) {
    const float count = stats.to_vector()[c];
    DPT_CHECK(count > 1) << "sync_batch_norm2d: needs more than one value per channel over all ranks";
  }
  Tensor sq = Tensor::empty({c}, DType::f32, device);
  k.sync_bn_sum_sq_dev(x, stats, sq);
  sum(sq);
  Tensor saved = Tensor::empty({2 * c}, DType::f32, device);  // mean, invstd
  k.sync_bn_finish_stats(stats, sq, options.eps, options.momentum, running_mean, running_var, saved);
  Tensor xhat = Tensor::empty(x.shape(), DType::f32, device);
  Tensor out = Tensor::empty(x.shape(), DType::f32, device);
  Tensor w = contiguous_on_device(weight.detach()), b = contiguous_on_device(bias.detach());
  k.sync_bn_normalize(x, saved, w, b, xhat, out);

  autograd::record("sync_batch_norm2d", out, {x_in, weight, bias},
                   [&k, xhat, w, saved, stats, sum, c, device](const Tensor& g_in) {
                     Tensor g = contiguous_on_device(g_in);
                     // Parameter gradients are this rank's share (DDP averages them); the
                     // input gradient needs the sums over every rank.
                     Tensor sums = Tensor::empty({2 * c}, DType::f32, device);
                     Tensor gw = Tensor::empty({c}, DType::f32, device), gb = Tensor::empty({c}, DType::f32, device);
                     k.sync_bn_grad_sums(g, xhat, sums, gb, gw);
                     sum(sums);
                     Tensor gx = Tensor::empty(g.shape(), DType::f32, device);
                     k.sync_bn_grad_input(g, xhat, w, saved, stats, sums, gx);
                     return std::vector<Tensor>{gx, gw, gb};
                   });
  return out;
}

}  // namespace

Tensor sync_batch_norm2d(const Tensor& x_in, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                         const Tensor& running_var, const BatchNormOptions& options, const SumAcrossRanks& sum) {
  const Device device = op_device_mixed("sync_batch_norm2d", {&x_in});
  op_device("sync_batch_norm2d", {&weight, &bias});
  DPT_CHECK(weight.device() == device)
      << "sync_batch_norm2d: inputs on different devices (" << device.str() << " and " << weight.device().str()
      << "); move them to one device first";
  DPT_CHECK(x_in.dim() == 4 && weight.numel() == x_in.size(1) && bias.numel() == x_in.size(1))
      << "sync_batch_norm2d: expected x [N, C, H, W] with weight and bias [C], got " << shape_str(x_in.shape())
      << ", " << shape_str(weight.shape());
  if (x_in.dtype() == DType::f32 && !(x_in.is_channels_last() && !x_in.is_contiguous()))
    return sync_batch_norm2d_f32(x_in, weight, bias, running_mean, running_var, options, sum);
  // bf16 or channels-last activations (precision, channels_last: nn/compute.h): the
  // statistics are f32 NCHW sums either way, so the input is cast to that and the output
  // back to the input's dtype and layout; the casts carry the gradient back the same way.
  Tensor y = sync_batch_norm2d_f32(cast(x_in, DType::f32, MemoryFormat::contiguous), weight, bias, running_mean,
                                   running_var, options, sum);
  return cast(y, x_in.dtype(), x_in.is_channels_last() ? MemoryFormat::channels_last : MemoryFormat::contiguous);
}

}  // namespace dpt
