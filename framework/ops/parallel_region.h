// The two communication ops of Megatron-style tensor parallelism (Shoeybi et al. 2019,
// arXiv 1909.08053, section 3), a conjugate pair over the ranks of a tensor-parallel group:
// f enters a parallel region (identity forward, sum backward), g leaves it (sum forward,
// identity backward). A column-parallel layer starts with f, a row-parallel one ends with g,
// so a column/row pair costs one all-reduce forward and one backward.
#pragma once

#include "core/tensor.h"
#include "ops/sum_across_ranks.h"

namespace dpt {

// f. Requires: x holds the same values on every rank of the group (a replicated
// activation) and every rank calls it in the same order. Ensures: x's values (sharing its
// storage); the backward sums the incoming gradient across ranks, since each rank's branch
// of the parallel region contributes one part of dL/dx.
Tensor copy_to_parallel_region(const Tensor& x, const SumAcrossRanks& sum);

// g. Requires: x of the same shape and dtype on every rank (one partial sum per rank), and
// every rank calling it in the same order. Ensures: a new contiguous tensor, the sum of
// every rank's x, identical on every rank; the backward passes the gradient through as it
// is, since the loss after g is computed identically on every rank.
Tensor reduce_from_parallel_region(const Tensor& x, const SumAcrossRanks& sum);

}  // namespace dpt
