#include <cmath>
#include <cstring>

#include "backend/cpu/kernels.h"

namespace dpt::cpu {

constexpr int64_t kParallelAbove = 65536;  // elements: the updates run on one thread below it

void sgd_update(const std::vector<SgdSlot>& slots, int, float lr, float wd, float mu, bool nesterov,
                const float* lr_on_device) {
  if (lr_on_device) lr = *lr_on_device;
  for (const SgdSlot& s : slots) {
    float* w = s.weight;
    const float* g = s.grad;
    float* vel = s.velocity;
    const int64_t n = s.n;
    if (mu == 0.0f) {
      for_each_index<kParallelAbove>(n, [=](int64_t i) { w[i] -= lr * (g[i] + wd * w[i]); });
    } else if (nesterov) {
      for_each_index<kParallelAbove>(n, [=](int64_t i) {
        float gi = g[i] + wd * w[i];
        vel[i] = mu * vel[i] + gi;
        w[i] -= lr * (gi + mu * vel[i]);
      });
    } else {
      for_each_index<kParallelAbove>(n, [=](int64_t i) {
        vel[i] = mu * vel[i] + g[i] + wd * w[i];
        w[i] -= lr * vel[i];
      });
    }
  }
}

void adamw_update(const std::vector<AdamWSlot>& slots, int, float lr, float decay, float b1, float b2,
                  float eps, float c1, float c2, const float* scalars_on_device) {
  if (scalars_on_device) {
    lr = scalars_on_device[0];
    decay = scalars_on_device[1];
    c1 = scalars_on_device[2];
    c2 = scalars_on_device[3];
  }
  for (const AdamWSlot& s : slots) {
    float* m = s.m;
    float* v = s.v;
    float* w = s.weight;
    const float* g = s.grad;
    for_each_index<kParallelAbove>(s.n, [=](int64_t i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      w[i] = w[i] * decay - lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
    });
  }
}

void ema_update(const Tensor& average, const Tensor& current, float d, const float* decay_on_device) {
  if (decay_on_device) d = *decay_on_device;
  const float* c = current.data<float>();
  float* a = average.data<float>();
  for_each_index<kParallelAbove>(average.numel(), [=](int64_t j) { a[j] = d * a[j] + (1 - d) * c[j]; });
}

// Exponent bits all ones is Inf or NaN. A branch-free OR over the bits vectorises, and
// gradients are finite on almost every step, so there is nothing to stop early for.
void flag_nonfinite(const std::vector<FiniteSlot>& slots, int, float* flag) {
  uint32_t bad = 0;
  for (const FiniteSlot& s : slots)
    for (int64_t i = 0; i < s.n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, s.x + i, 4);
      bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
  if (bad) *flag = 1.0f;
}

}  // namespace dpt::cpu
