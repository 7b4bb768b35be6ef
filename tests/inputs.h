// Inputs that keep kernel comparisons and finite differences away from kinks and ties,
// shared by the op tests on the CPU and on CUDA.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
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

// a and b for add_relu, requiring grad: values in [-2, 2], and spread among them sums of
// exactly +0 and -0, sums one float step either side of 0, and NaN sums (NaN in either input,
// inf - inf); with `infinite_sums` also inf + 1 and -inf + 1 (comparisons within a tolerance
// cannot take those: |inf - inf| is NaN).
inline std::pair<Tensor, Tensor> add_relu_inputs(const Shape& shape, uint64_t seed, bool infinite_sums) {
  Tensor a = random_tensor(shape, seed, -2.0f, 2.0f), b = random_tensor(shape, seed + 1, -2.0f, 2.0f);
  const float nan = std::nanf(""), inf = INFINITY;
  std::vector<std::pair<float, float>> edges = {{0.5f, -0.5f},
                                                {0.0f, -0.0f},
                                                {-0.0f, -0.0f},
                                                {1.0f, -std::nextafter(1.0f, 0.0f)},
                                                {1.0f, -std::nextafter(1.0f, 2.0f)},
                                                {nan, 1.0f},
                                                {1.0f, nan},
                                                {-1.0f, -nan},
                                                {inf, -inf}};
  if (infinite_sums) edges.insert(edges.end(), {{inf, 1.0f}, {-inf, 1.0f}});
  int64_t n = a.numel(), step = std::max<int64_t>(1, n / static_cast<int64_t>(edges.size()));
  for (size_t k = 0; k < edges.size() && static_cast<int64_t>(k) * step < n; ++k) {
    a.data<float>()[k * step] = edges[k].first;
    b.data<float>()[k * step] = edges[k].second;
  }
  return {a.set_requires_grad(true), b.set_requires_grad(true)};
}

// a and b whose sums are at least 0.05 from 0 (a = s - b with s from away_from_zero), both
// requiring grad: finite differences of add_relu that do not cross the kink.
inline std::pair<Tensor, Tensor> add_relu_away_from_zero(const Shape& shape, uint64_t seed) {
  Tensor s = away_from_zero(shape, seed), b = random_tensor(shape, seed + 1);
  Tensor a = Tensor::empty(shape);
  for (int64_t i = 0; i < s.numel(); ++i) a.data<float>()[i] = s.data<float>()[i] - b.data<float>()[i];
  return {a.set_requires_grad(true), b.set_requires_grad(true)};
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

// Inputs for a conv with a fused ReLU whose mask cannot depend on summation order or bf16
// rounding: weights and activations from quarter_steps (k/4, |k| <= 4), so a conv of at most
// 16 taps sums multiples of 1/16 below 16 in magnitude, exact in f32 in any order and in bf16
// (at most 8 significant bits); with a bias from odd_32nds ((2k+1)/32 in (-1, 1)) every
// pre-activation is an odd multiple of 1/32, at least 1/32 from the kink on every device.
// Values first + k * step for k drawn uniformly from 0 .. levels - 1, requiring grad.
inline Tensor grid_values(const Shape& shape, uint64_t seed, int levels, float first, float step) {
  std::mt19937 gen(seed);
  std::vector<float> v(shape_numel(shape));
  for (float& x : v) x = first + static_cast<float>(gen() % static_cast<unsigned>(levels)) * step;
  return Tensor::from_vector(v, shape).set_requires_grad(true);
}
inline Tensor quarter_steps(const Shape& shape, uint64_t seed) {
  return grid_values(shape, seed, 9, -1.0f, 0.25f);
}
inline Tensor odd_32nds(const Shape& shape, uint64_t seed) {
  return grid_values(shape, seed, 32, -31.0f / 32, 2.0f / 32);
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
