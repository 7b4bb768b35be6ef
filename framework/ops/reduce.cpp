#include "ops/reduce.h"

#include <algorithm>
#include <vector>

#include "autograd/node.h"
#include "ops/device_check.h"

namespace dpt {
namespace {

// Sum in double: a mean over a whole batch of activations loses digits in f32. Fixed-size
// chunks are added up in chunk order, so the result has the same bits whatever the thread
// count or timing (an OpenMP reduction clause adds the threads' partial sums in the order
// they finish).
double sum_double(const Tensor& x) {
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
  return s;
}

Tensor scaled_sum(const char* name, const Tensor& x, double scale) {
  check_cpu_f32(name, {&x});
  Tensor out = Tensor::full({}, static_cast<float>(sum_double(x) * scale));
  autograd::record(name, out, {x}, [shape = x.shape(), scale](const Tensor& g) {
    return std::vector<Tensor>{Tensor::full(shape, g.item() * static_cast<float>(scale))};
  });
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) { return scaled_sum("sum", x, 1.0); }

Tensor mean(const Tensor& x) {
  DPT_CHECK(x.numel() > 0) << "mean of an empty tensor";
  return scaled_sum("mean", x, 1.0 / static_cast<double>(x.numel()));
}

}  // namespace dpt
