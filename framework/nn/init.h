// Weight initialisers (He et al. 2015 for ReLU networks, Glorot & Bengio 2010), in place
// on contiguous f32 CPU tensors. fan_in = in_channels/groups * kernel area.
#pragma once

#include <cmath>

#include "core/rng.h"
#include "core/tensor.h"

namespace dpt::nn {

// N(0, sqrt(2 / fan)) — the ReLU gain.
inline void kaiming_normal(const Tensor& t, int64_t fan, Rng& rng) {
  rng.fill_normal(t, 0.0f, static_cast<float>(std::sqrt(2.0 / fan)));
}
// U(-b, b), b = sqrt(6 / fan).
inline void kaiming_uniform(const Tensor& t, int64_t fan, Rng& rng) {
  const float bound = static_cast<float>(std::sqrt(6.0 / fan));
  rng.fill_uniform(t, -bound, bound);
}
// U(-b, b), b = sqrt(6 / (fan_in + fan_out)).
inline void xavier_uniform(const Tensor& t, int64_t fan_in, int64_t fan_out, Rng& rng) {
  const float bound = static_cast<float>(std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)));
  rng.fill_uniform(t, -bound, bound);
}
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for Linear and Conv biases.
inline void fan_in_uniform(const Tensor& t, int64_t fan_in, Rng& rng) {
  const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
  rng.fill_uniform(t, -bound, bound);
}

}  // namespace dpt::nn
