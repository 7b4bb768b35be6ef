// Weight initialisers (He et al. 2015 for ReLU networks, Glorot & Bengio 2010), in place
// on contiguous f32 CPU tensors. fan_in = in_channels/groups * kernel area.
#pragma once

#include "core/rng.h"
#include "core/tensor.h"

namespace dpt::nn {

// N(0, sqrt(2 / fan)) — the ReLU gain.
void kaiming_normal(const Tensor& t, int64_t fan, Rng& rng);
// U(-b, b), b = sqrt(6 / fan).
void kaiming_uniform(const Tensor& t, int64_t fan, Rng& rng);
// U(-b, b), b = sqrt(6 / (fan_in + fan_out)).
void xavier_uniform(const Tensor& t, int64_t fan_in, int64_t fan_out, Rng& rng);
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for Linear and Conv biases.
void fan_in_uniform(const Tensor& t, int64_t fan_in, Rng& rng);

}  // namespace dpt::nn
