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
#include "ops/sum_across_ranks.h"

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

// y = x W^T + b, W split by rows (output features). Input: the whole x, the same on every
// rank. Output: this rank's slice of the output features, [N, out / tp].
class ColumnParallelLinear : public Linear {
 public:
  // Requires: `tp` a group this rank belongs to, whose size divides full's output count.
  ColumnParallelLinear(const Linear& full, dist::GroupPtr tp);
  Tensor forward(const Tensor& x) override;
  Tensor forward_relu(const Tensor& x) override;  // the ReLU acts on the slice, as it would on the whole
  std::string describe() const override;

 private:
  dist::GroupPtr tp_;
  SumAcrossRanks sum_;
};

// y = x W^T + b, W split by columns (input features). Input: this rank's slice of the
// input features [N, in / tp] (what a ColumnParallelLinear outputs). Output: the whole y,
// the same on every rank: the partial products are summed across ranks, then the bias
// (whole on every rank) is added once.
class RowParallelLinear : public Linear {
 public:
  // Requires: `tp` a group this rank belongs to, whose size divides full's input count.
  RowParallelLinear(const Linear& full, dist::GroupPtr tp);
  Tensor forward(const Tensor& x) override;
  Tensor forward_relu(const Tensor& x) override;
  std::string describe() const override;

 private:
  dist::GroupPtr tp_;
  SumAcrossRanks sum_;
  Tensor bias_;  // whole, added after the sum; registered as "bias" (the base layer has none)
};

// conv2d(x, W) + b with W split by output channels. Input: the whole x. Output: this rank's
// slice of the output channels, [N, out / tp, H', W'].
class ColumnParallelConv2d : public Conv2d {
 public:
  // Requires: `tp` a group this rank belongs to, whose size divides full's output
  // channels; full not grouped (groups 1).
  ColumnParallelConv2d(const Conv2d& full, dist::GroupPtr tp);
  Tensor forward(const Tensor& x) override;
  Tensor forward_relu(const Tensor& x) override;
  std::string describe() const override;

 private:
  dist::GroupPtr tp_;
  SumAcrossRanks sum_;
};

// conv2d(x, W) + b with W split by input channels. Input: this rank's slice of the input
// channels (what a ColumnParallelConv2d outputs). Output: the whole result, summed across
// ranks, then the bias added once.
class RowParallelConv2d : public Conv2d {
 public:
  // Requires: `tp` a group this rank belongs to, whose size divides full's input channels;
  // full not grouped (groups 1).
  RowParallelConv2d(const Conv2d& full, dist::GroupPtr tp);
  Tensor forward(const Tensor& x) override;
  Tensor forward_relu(const Tensor& x) override;
  std::string describe() const override;

 private:
  dist::GroupPtr tp_;
  SumAcrossRanks sum_;
  Tensor bias_;  // whole, added after the sum; registered as "bias" (the base layer has none)
};

}  // namespace dpt::nn
