#include "ops/parallel_region.h"

#include "autograd/node.h"
#include "ops/device_check.h"

namespace dpt {
namespace {

// A contiguous copy of t on its device that the sum may overwrite.
Tensor summed_copy(const Tensor& t, const SumAcrossRanks& sum) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  out.copy_from(contiguous_on_device(t));
  sum(out);
  return out;
}

}  // namespace

Tensor copy_to_parallel_region(const Tensor& x, const SumAcrossRanks& sum) {
  op_device_mixed("copy_to_parallel_region", {&x});
  DPT_CHECK(sum) << "copy_to_parallel_region: no sum across ranks given";
  Tensor out = x.detach();
  autograd::record("copy_to_parallel_region", out, {x},
                   [sum](const Tensor& g) { return std::vector<Tensor>{summed_copy(g, sum)}; });
  return out;
}

Tensor reduce_from_parallel_region(const Tensor& x, const SumAcrossRanks& sum) {
  op_device_mixed("reduce_from_parallel_region", {&x});
  DPT_CHECK(sum) << "reduce_from_parallel_region: no sum across ranks given";
  Tensor out = summed_copy(x, sum);
  autograd::record("reduce_from_parallel_region", out, {x},
                   [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

}  // namespace dpt
