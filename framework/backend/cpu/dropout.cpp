#include "backend/cpu/dropout.h"

namespace dpt::cpu {

void dropout_forward(const Tensor& x, float p, Rng& rng, const Tensor& mask, const Tensor& out) {
  Tensor in = x.contiguous();
  float keep_scale = 1.0f / (1.0f - p);
  float* m = mask.data<float>();
  const float* xi = in.data<float>();
  float* o = out.data<float>();
  // Two 32-bit draws from each 64-bit number.
  const uint64_t threshold = static_cast<uint64_t>(static_cast<double>(p) * 4294967296.0);
  for (int64_t i = 0, n = x.numel(); i < n; i += 2) {
    uint64_t bits = rng.next_u64();
    m[i] = (bits & 0xffffffffu) < threshold ? 0.0f : keep_scale;
    if (i + 1 < n) m[i + 1] = (bits >> 32) < threshold ? 0.0f : keep_scale;
  }
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = xi[i] * m[i];
}

}  // namespace dpt::cpu
