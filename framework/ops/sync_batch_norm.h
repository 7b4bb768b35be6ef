// Synchronised batch normalisation: batch statistics over the whole global batch, every
// rank's share, instead of over the local one. The op only needs a way to sum a small
// tensor across ranks, so it stays free of the distributed layer.
#pragma once

#include "core/tensor.h"
#include "ops/norm.h"
#include "ops/parallel_region.h"

namespace dpt {

// Training-mode batch_norm2d whose mean and (biased) variance are those of every rank's x
// together; running stats get the unbiased global variance; the backward sums its
// per-channel reductions across ranks too, so with DDP N ranks at batch B/N match one rank
// at batch B. Requires the same C on every rank, called in the same order. x may be bf16
// and/or channels-last on CUDA (so is the output); the statistics are f32.
Tensor sync_batch_norm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                         const Tensor& running_var, const BatchNormOptions& options, const SumAcrossRanks& sum);

}  // namespace dpt
