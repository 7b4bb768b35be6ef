// Tensor-parallel layers (Megatron-LM's ColumnParallelLinear and RowParallelLinear, and
// their convolution twins): one layer's weight split over the ranks of a tensor-parallel
// group, each rank computing its part. A column-parallel layer splits the outputs and
// leaves each rank a slice of them; the row-parallel layer after it takes that slice as its
// input and sums the ranks' partial outputs, so the pair costs one all-reduce forward and
// one backward (ops/parallel_region.h) and everything outside it stays replicated.
//
// Each layer is made from the unsplit layer and keeps this rank's part of its weight, so a
// tensor-parallel model built from the same seed starts from the same whole weights as the
// one-process model. Parameters keep the unsplit layer's names ("weight", "bias").
#pragma once

#include "comm/process_group.h"
#include "nn/layers.h"
#include "ops/parallel_region.h"

namespace dpt::nn {

// This rank's part of `full` when dimension `dim` is split into `size` equal parts, as a
// new contiguous tensor. Requires: full a CPU tensor, 0 <= rank < size, and full.size(dim)
// divisible by size (else Error saying so).
Tensor shard_of(const Tensor& full, int64_t dim, int rank, int size);

// The whole tensor from each rank's shard along `dim` (the inverse of shard_of), as a new
// contiguous CPU tensor. Collective over `group`: every rank passes a shard of one shape.
Tensor gather_shards(const Tensor& shard, int64_t dim, dist::ProcessGroup& group);

// `mine` (a tensor-parallel model's state_dict) with each split tensor gathered whole:
// a tensor smaller than its namesake in `unsplit` (the one-process model's state_dict, for
// the shapes) in one dimension by a factor of group.size() is gathered along that
// dimension; the others are taken as they are. Collective over `group` (the tp group).
// Throws Error when the names differ or a tensor is not such a slice of its namesake.
NamedTensors gather_whole_state(const NamedTensors& mine, const NamedTensors& unsplit,
                                dist::ProcessGroup& group);

// `Layer` (Linear or Conv2d, ungrouped) split over `tp`, a group this rank belongs to whose
// size divides the split dimension.
// Column (Row = false): W split by output features or channels. Input: the whole x, the
// same on every rank. Output: this rank's slice of the outputs ([N, out / tp, ...]); a fused
// ReLU acts on the slice, as it would on the whole.
// Row (Row = true): W split by input features or channels. Input: this rank's slice of
// them (what a column-parallel layer outputs). Output: the whole result, the same on every
// rank: the partial products are summed across ranks, then the bias (whole on every rank)
// is added once.
template <class Layer, bool Row>
class TensorParallel : public Layer {
 public:
  TensorParallel(const Layer& full, dist::GroupPtr tp);
  std::string describe() const override;

 private:
  Tensor run(const Tensor& x, bool relu) override;

  dist::GroupPtr tp_;
  SumAcrossRanks sum_;
  Tensor bias_;  // Row: whole, added after the sum; registered as "bias" (the base layer has none)
};

using ColumnParallelLinear = TensorParallel<Linear, false>;
using RowParallelLinear = TensorParallel<Linear, true>;
using ColumnParallelConv2d = TensorParallel<Conv2d, false>;
using RowParallelConv2d = TensorParallel<Conv2d, true>;

}  // namespace dpt::nn
