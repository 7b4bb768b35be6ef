#include "datasets/sampler.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "datasets/shuffle.h"

namespace dpt::data {

std::vector<int64_t> train_shard(int64_t n, uint64_t seed, int64_t epoch, int rank, int world_size, bool shuffle) {
  DPT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size && n >= 1)
      << "train_shard: rank " << rank << " of " << world_size << " over " << n << " samples";
  std::vector<int64_t> order;
  if (shuffle) {
    order = shuffle_permutation(n, seed, epoch);
  } else {
    order.resize(n);
    std::iota(order.begin(), order.end(), 0);
  }
  int64_t per_rank = (n + world_size - 1) / world_size;
  std::vector<int64_t> shard;
  shard.reserve(per_rank);
  for (int64_t k = 0; k < per_rank; ++k) shard.push_back(order[(k * world_size + rank) % n]);
  return shard;
}

std::vector<int64_t> train_shard_rest(int64_t n, uint64_t seed, int64_t epoch, int rank, int world_size, bool shuffle,
                                      int64_t consumed) {
  DPT_CHECK(consumed >= 0) << "train_shard_rest: consumed must be >= 0, got " << consumed;
  std::vector<int64_t> shard = train_shard(n, seed, epoch, rank, world_size, shuffle);
  const int64_t skip = std::min<int64_t>(consumed / world_size, static_cast<int64_t>(shard.size()));
  shard.erase(shard.begin(), shard.begin() + skip);
  return shard;
}

std::vector<int64_t> eval_shard(int64_t n, int rank, int world_size) {
  DPT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size) << "eval_shard: rank " << rank << " of " << world_size;
  int64_t begin = n * rank / world_size, end = n * (rank + 1) / world_size;
  std::vector<int64_t> shard(end - begin);
  std::iota(shard.begin(), shard.end(), begin);
  return shard;
}

}  // namespace dpt::data
