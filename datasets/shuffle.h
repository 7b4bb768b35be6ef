// The per-epoch permutation of sample indices. Every rank and every platform must draw
// the same one from (seed, epoch), so the generator and the shuffle are spelled out here
// rather than left to std::shuffle and std::uniform_int_distribution, whose algorithms
// the standard leaves to each library.
#pragma once

#include <cstdint>
#include <vector>

namespace dpt::data {

// A permutation of 0..n-1 that depends only on (n, seed, epoch): std::mt19937_64 seeded
// with a splitmix64 mix of seed and epoch, then Fisher-Yates with unbiased bounded draws.
std::vector<int64_t> shuffle_permutation(int64_t n, uint64_t seed, int64_t epoch);

// splitmix64's finaliser: nearby inputs give unrelated outputs (seeds from (seed, epoch,
// ...) tuples here and in augmentation).
uint64_t mix64(uint64_t x);

}  // namespace dpt::data
