// sum and mean over a whole tensor: the result and its gradient stay on the input's device
// (a one-element tensor; the CPU adds in double, in a fixed order).
#include "ops/reduce.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/device_check.h"

namespace dpt {
namespace {

Tensor scaled_sum(const char* name, const Tensor& x, double scale) {
  Device device = op_device(name, {&x});
  const Kernels& k = kernels_for(device);
  Tensor out = Tensor::empty({}, DType::f32, device);
  k.sum_scaled(x, scale, out);
  autograd::record(name, out, {x}, [&k, shape = x.shape(), scale, device](const Tensor& g) {
    Tensor grad = Tensor::empty(shape, DType::f32, device);
    k.fill_scaled(grad, g, static_cast<float>(scale));
    return std::vector<Tensor>{grad};
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
