#include "backend/cpu/reduce.h"

#include <algorithm>
#include <vector>

namespace dpt::cpu {

// In double: a mean over a whole batch of activations loses digits in f32. An OpenMP
// reduction clause would add the threads' partial sums in the order they finish.
void sum_scaled(const Tensor& x, double scale, const Tensor& out) {
  constexpr int64_t kChunk = 32768;
  Tensor c = x.contiguous();
  const float* p = c.data<float>();
  const int64_t n = c.numel(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t k = 0; k < chunks; ++k) {
    double s = 0;
    for (int64_t i = k * kChunk, end = std::min(n, i + kChunk); i < end; ++i) s += p[i];
    partial[k] = s;
  }
  double s = 0;
  for (double v : partial) s += v;
  out.data<float>()[0] = static_cast<float>(s * scale);
}

void fill_scaled(const Tensor& out, const Tensor& scalar, float scale) { out.fill_(scalar.item() * scale); }

}  // namespace dpt::cpu
