// The two communication ops of Megatron-style tensor parallelism (Shoeybi et al. 2019,
// arXiv 1909.08053, section 3), a conjugate pair over the ranks of a tensor-parallel group:
// f enters a parallel region (identity forward, sum backward), g leaves it (sum forward,
// identity backward). A column-parallel layer starts with f, a row-parallel one ends with g,
// so a column/row pair costs one all-reduce forward and one backward.
#pragma once

#include "core/tensor.h"
#include "ops/sum_across_ranks.h"

namespace dpt {

// f. Requires: x the same on every rank, every rank calling in the same order. Ensures:
// x's values (sharing storage); the backward sums the gradient across ranks.
Tensor copy_to_parallel_region(const Tensor& x, const SumAcrossRanks& sum);

// g. Requires: x of one shape and dtype on every rank, called in the same order. Ensures:
// a new contiguous tensor, the sum of every rank's x; the backward passes the gradient on.
Tensor reduce_from_parallel_region(const Tensor& x, const SumAcrossRanks& sum);

}  // namespace dpt
