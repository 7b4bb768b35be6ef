// Inverted dropout: in training, zero each element with probability p and scale the rest
// by 1/(1-p), so evaluation needs no rescaling.
#pragma once

#include "core/rng.h"
#include "core/tensor.h"

namespace dpt {

// Requires 0 <= p < 1. Returns x itself when !training or p == 0.
Tensor dropout(const Tensor& x, float p, bool training, Rng& rng);

}  // namespace dpt
