// dropout: a mask drawn on the input's device from the caller's generator (serially on the
// CPU; one draw seeds CUDA's whole mask), and a backward that multiplies by it.
#include "ops/dropout.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/device_check.h"

namespace dpt {

Tensor dropout(const Tensor& x, float p, bool training, Rng& rng) {
  DPT_CHECK(p >= 0.0f && p < 1.0f) << "dropout: probability must be in [0, 1), got " << p;
  if (!training || p == 0.0f) return x;
  Device device = op_device("dropout", {&x});
  const Kernels& k = kernels_for(device);
  // The seed is a kernel argument: a replayed graph would drop the same elements every step.
  DPT_CHECK(!k.capturing(device.index))
      << "dropout inside a CUDA graph capture: the graph would repeat one mask on every replay (train "
         "without cuda_graphs, or set the model's dropout to 0)";
  Tensor in = contiguous_on_device(x);
  Tensor mask = Tensor::empty(x.shape(), DType::f32, device);  // 0 or 1/(1-p)
  Tensor out = Tensor::empty(x.shape(), DType::f32, device);
  k.dropout_forward(in, p, rng, mask, out);
  autograd::record("dropout", out, {x}, [&k, mask](const Tensor& g) {
    Tensor gi = Tensor::empty(g.shape(), DType::f32, g.device());
    k.binary(BinaryOp::mul, contiguous_on_device(g), mask, gi);
    return std::vector<Tensor>{gi};
  });
  return out;
}

}  // namespace dpt
