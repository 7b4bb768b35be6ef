// The distributed sampler: which samples each rank sees in an epoch. Training: the
// epoch's permutation from (seed, epoch), padded by wrapping around so every rank gets
// the same count (and runs the same number of steps), then dealt out round-robin —
// PyTorch's DistributedSampler. Evaluation: contiguous, unpadded shards, so each test
// sample is counted exactly once when the ranks' totals are summed.
#pragma once

#include <cstdint>
#include <vector>

namespace dpt::data {

// Requires 0 <= rank < world_size, n >= 1. Ensures: ceil(n / world_size) indices; over all
// ranks, every index in [0, n) appears at least once (exactly once if world_size divides n).
std::vector<int64_t> train_shard(int64_t n, uint64_t seed, int64_t epoch, int rank, int world_size, bool shuffle);

// The rest of train_shard(...) after the first `consumed` samples of the epoch's global
// order were trained on, possibly by another world size (a resumed checkpoint): each rank
// drops the first consumed / world_size indices of its shard. With the same world size
// and consumed = steps x batch x world_size this is exactly what those steps had not yet
// used; with another one, up to world_size - 1 samples near the cut are seen twice.
// Requires consumed >= 0.
std::vector<int64_t> train_shard_rest(int64_t n, uint64_t seed, int64_t epoch, int rank, int world_size, bool shuffle,
                                      int64_t consumed);

// Requires 0 <= rank < world_size. Ensures: the ranks' shards partition [0, n) in order.
std::vector<int64_t> eval_shard(int64_t n, int rank, int world_size);

}  // namespace dpt::data
