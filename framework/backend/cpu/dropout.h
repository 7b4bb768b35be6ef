// Dropout's mask on the CPU, drawn serially from the caller's generator so that runs
// repeat whatever the thread count.
#pragma once

#include "core/rng.h"
#include "core/tensor.h"

namespace dpt::cpu {

// Requires: x, mask and out f32 of one shape, mask and out contiguous; 0 <= p < 1.
// Ensures: mask = 0 with probability p, else 1/(1-p); out = x mask.
void dropout_forward(const Tensor& x, float p, Rng& rng, const Tensor& mask, const Tensor& out);

}  // namespace dpt::cpu
