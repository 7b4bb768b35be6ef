// Inputs that keep kernel comparisons and finite differences away from kinks and ties,
// shared by the op tests on the CPU and on CUDA.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "gradcheck.h"

namespace dpt::testing {

// random_tensor that requires grad: an input whose gradient a test checks.
inline Tensor random_leaf(const Shape& shape, uint64_t seed, float low = -1.0f, float high = 1.0f) {
  return random_tensor(shape, seed, low, high).set_requires_grad(true);
}

// i64 labels [n] with the given values, or drawn uniformly from [0, classes).
inline Tensor labels_of(const std::vector<int64_t>& v) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
}
inline Tensor random_labels(int64_t n, int64_t classes, uint64_t seed) {
  std::mt19937 gen(seed);
  std::vector<int64_t> v(n);
  for (auto& l : v) l = static_cast<int64_t>(gen() % classes);
  return labels_of(v);
}

// Values in [-1, 1] pushed at least 0.05 away from 0, the ReLU kink.
inline Tensor away_from_zero(const Shape& shape, uint64_t seed) {
  Tensor t = random_tensor(shape, seed);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] >= 0 ? p[i] + 0.05f : p[i] - 0.05f;
  return t;
}

// Distinct values in random order, spaced `step` apart: no ties for max pooling, and
// finite differences of size < step/2 cannot change which element is the maximum.
inline Tensor distinct_tensor(const Shape& shape, uint64_t seed, float step = 0.05f) {
  int64_t n = shape_numel(shape);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (static_cast<float>(i) - n / 2.0f) * step;
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return Tensor::from_vector(v, shape);
}

// Per channel a shuffled symmetric set of values, all at least 0.5 standard deviations
// from the mean (0): with bias 0 no batch-norm output is near the ReLU's kink.
inline Tensor kink_free_input(const Shape& s, uint64_t seed) {
  int64_t per_channel = s[0] * s[2] * s[3];
  std::mt19937 gen(seed);
  std::vector<float> v(shape_numel(s));
  for (int64_t ch = 0; ch < s[1]; ++ch) {
    std::vector<float> values;
    for (int64_t i = 0; i < per_channel / 2; ++i) {
      float m = 0.5f + 0.1f * static_cast<float>(i % 8);
      values.push_back(m);
      values.push_back(-m);
    }
    std::shuffle(values.begin(), values.end(), gen);
    int64_t k = 0;
    for (int64_t i = 0; i < s[0]; ++i)
      for (int64_t j = 0; j < s[2] * s[3]; ++j) v[(i * s[1] + ch) * s[2] * s[3] + j] = values[k++];
  }
  return Tensor::from_vector(v, s);
}

}  // namespace dpt::testing
