// Synchronised batch normalisation: batch statistics over the whole global batch, every
// rank's share, instead of over the local one. The op only needs a way to sum a small
// tensor across ranks, so it stays free of the distributed layer.
#pragma once

#include "core/tensor.h"
#include "ops/norm.h"
#include "ops/sum_across_ranks.h"

namespace dpt {

// Training-mode batch_norm2d whose mean and (biased) variance are those of the
// concatenation of every rank's x; running stats get the unbiased global variance. Its
// backward sums the two per-channel gradient reductions across ranks as well, so with
// DDP averaging the parameter gradients, N ranks at batch B/N match one rank at batch B.
// Requires: the same C on every rank, and every rank calling it in the same order. Runs
// on the CPU or on CUDA (x, weight, bias and the running stats on one device); on CUDA x
// may also be bf16 and/or channels-last (mixed precision), and the output then is too,
// with the statistics still computed in f32.
Tensor sync_batch_norm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                         const Tensor& running_var, const BatchNormOptions& options, const SumAcrossRanks& sum);

}  // namespace dpt
