// Inverted dropout on CUDA. The CPU draws its mask serially from the caller's Rng; a GPU
// cannot, so each element's bits come from a counter-based hash of (seed, index), with
// the seed drawn once per call from the caller's Rng: runs stay reproducible from the
// seed, but CPU and CUDA masks differ.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dpt::cuda {

// Requires: x, mask, out f32 contiguous of one shape on one CUDA device; 0 <= p < 1.
// Ensures: mask[i] = 0 with probability p, else 1 / (1 - p) (decided as the CPU does: 32
// random bits below p 2^32 drop); out = x * mask.
void dropout_forward(const Tensor& x, float p, uint64_t seed, const Tensor& mask, const Tensor& out);

}  // namespace dpt::cuda
