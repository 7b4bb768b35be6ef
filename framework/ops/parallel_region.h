// The two communication ops of Megatron-style tensor parallelism (Shoeybi et al. 2019,
// arXiv 1909.08053, section 3), a conjugate pair over the ranks of a tensor-parallel group:
// f enters a parallel region (identity forward, sum backward), g leaves it (sum forward,
// identity backward). A column-parallel layer starts with f, a row-parallel one ends with g,
// so a column/row pair costs one all-reduce forward and one backward.
#pragma once

#include <functional>

#include "core/tensor.h"

namespace dpt {

// What the ops that span ranks (these two, synchronised batch norm) need from the
// distributed layer: a function that sums a contiguous tensor over all ranks in place (on
// the CPU before returning; on CUDA before any work queued on the compute stream after the
// call). A function, so the ops stay free of process groups; the caller binds one.
using SumAcrossRanks = std::function<void(const Tensor&)>;

// f. Requires: x the same on every rank, every rank calling in the same order. Ensures:
// x's values (sharing storage); the backward sums the gradient across ranks.
Tensor copy_to_parallel_region(const Tensor& x, const SumAcrossRanks& sum);

// g. Requires: x of one shape and dtype on every rank, called in the same order. Ensures:
// a new contiguous tensor, the sum of every rank's x; the backward passes the gradient on.
Tensor reduce_from_parallel_region(const Tensor& x, const SumAcrossRanks& sum);

}  // namespace dpt
