// Synchronised batch norm on CUDA, the twin of the loops in ops/sync_batch_norm.cpp: the
// per-channel sums that go across ranks, and the elementwise passes between them. Sums
// run in double in a fixed order (partial sums per block, then per channel in index
// order; no atomics), and are handed over as f32, as the CPU's are. x, gradients, xhat
// and outputs are contiguous NCHW f32 [N, C, H, W]; the rest contiguous f32; all on one
// CUDA device. Nothing here waits for the GPU.
#pragma once

#include "core/tensor.h"

namespace dpt::cuda {

// stats [C + 1]: stats[ch] = sum over N, H, W of x[., ch, ., .]; stats[C] = N H W.
void sync_bn_sum(const Tensor& x, const Tensor& stats);
// Requires `stats` as sync_bn_sum left it, summed over ranks (count = stats[C]).
// Ensures: sq [C] = sum over N, H, W of (x - mean)^2 with mean = stats[ch] / count in double.
void sync_bn_sum_sq_dev(const Tensor& x, const Tensor& stats, const Tensor& sq);
// Requires stats and sq summed over ranks, count > 1. Ensures: saved [2C] = (mean as f32,
// invstd = 1 / sqrt(var + eps)) with var = sq / count; running_mean and running_var (if
// defined) = (1 - momentum) running + momentum (mean, var count / (count - 1)).
void sync_bn_finish_stats(const Tensor& stats, const Tensor& sq, float eps, float momentum,
                          const Tensor& running_mean, const Tensor& running_var, const Tensor& saved);
// xhat = (x - mean) invstd; out = xhat weight + bias (saved from sync_bn_finish_stats).
void sync_bn_normalize(const Tensor& x, const Tensor& saved, const Tensor& weight, const Tensor& bias,
                       const Tensor& xhat, const Tensor& out);
// sums [2C] = (sum of g, sum of g xhat) per channel; grad_bias and grad_weight [C] get the
// same two local sums (the parameter gradients are this rank's share).
void sync_bn_grad_sums(const Tensor& grad_out, const Tensor& xhat, const Tensor& sums,
                       const Tensor& grad_bias, const Tensor& grad_weight);
// Requires `sums` summed over ranks, `stats` the forward's (for the count). Ensures:
// grad_x = weight invstd (g - sum_g / count - xhat sum_g_xhat / count).
void sync_bn_grad_input(const Tensor& grad_out, const Tensor& xhat, const Tensor& weight, const Tensor& saved,
                        const Tensor& stats, const Tensor& sums, const Tensor& grad_x);

}  // namespace dpt::cuda
