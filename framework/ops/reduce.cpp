#include "ops/reduce.h"

#include "autograd/node.h"
#include "ops/device_check.h"

namespace dpt {
namespace {

// Sum in double: a mean over a whole batch of activations loses digits in f32.
double sum_double(const Tensor& x) {
  Tensor c = x.contiguous();
  const float* p = c.data<float>();
  double s = 0;
  int64_t n = c.numel();
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) s += p[i];
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
