// Deterministic Fisher-Yates over std::mt19937_64 (whose output the standard fixes).
#include "datasets/shuffle.h"

#include <random>
#include <utility>

#include "core/error.h"

namespace dpt::data {
namespace {

// Uniform in [0, bound) by rejection: draws above the largest multiple of bound are
// redrawn, so there is no modulo bias.
uint64_t uniform_below(std::mt19937_64& engine, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do x = engine();
  while (x >= limit);
  return x % bound;
}

}  // namespace

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::vector<int64_t> shuffle_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  DPT_CHECK(n >= 0) << "shuffle: sample count must be >= 0, got " << n;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 engine(mix64(mix64(seed) ^ static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(uniform_below(engine, static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace dpt::data
