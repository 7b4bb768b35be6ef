#include "nn/init.h"

#include <cmath>

namespace dpt::nn {

void kaiming_normal(const Tensor& t, int64_t fan, Rng& rng) {
  rng.fill_normal(t, 0.0f, static_cast<float>(std::sqrt(2.0 / fan)));
}

void kaiming_uniform(const Tensor& t, int64_t fan, Rng& rng) {
  float bound = static_cast<float>(std::sqrt(6.0 / fan));
  rng.fill_uniform(t, -bound, bound);
}

void xavier_uniform(const Tensor& t, int64_t fan_in, int64_t fan_out, Rng& rng) {
  float bound = static_cast<float>(std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)));
  rng.fill_uniform(t, -bound, bound);
}

void fan_in_uniform(const Tensor& t, int64_t fan_in, Rng& rng) {
  float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
  rng.fill_uniform(t, -bound, bound);
}

}  // namespace dpt::nn
