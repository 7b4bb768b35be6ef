#include "ops/dropout.h"

#include "autograd/node.h"
#include "ops/device_check.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/dropout.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/graph.h"
#endif

namespace dpt {
namespace {

#ifdef DPT_WITH_CUDA
// One draw from the caller's generator seeds the whole mask (see backend/cuda/dropout.h).
Tensor dropout_cuda(const Tensor& x, float p, Rng& rng) {
  // The seed is a kernel argument: a replayed graph would drop the same elements every step.
  DPT_CHECK(!cuda::capture_active(x.device().index))
      << "dropout inside a CUDA graph capture: the graph would repeat one mask on every replay (train "
         "without cuda_graphs, or set the model's dropout to 0)";
  Tensor in = cuda::contiguous(x);
  Tensor mask = Tensor::empty(x.shape(), DType::f32, x.device());  // 0 or 1/(1-p)
  Tensor out = Tensor::empty(x.shape(), DType::f32, x.device());
  cuda::dropout_forward(in, p, rng.next_u64(), mask, out);
  autograd::record("dropout", out, {x}, [mask](const Tensor& g) {
    check_grad("dropout backward", g, mask.device());
    Tensor gi = Tensor::empty(g.shape(), DType::f32, g.device());
    cuda::binary(cuda::BinaryOp::mul, cuda::contiguous(g), mask, gi);
    return std::vector<Tensor>{gi};
  });
  return out;
}
#endif

}  // namespace

Tensor dropout(const Tensor& x, float p, bool training, Rng& rng) {
  DPT_CHECK(p >= 0.0f && p < 1.0f) << "dropout: probability must be in [0, 1), got " << p;
  if (!training || p == 0.0f) return x;
  [[maybe_unused]] Device device = op_device("dropout", {&x});
#ifdef DPT_WITH_CUDA
  if (device.is_cuda()) return dropout_cuda(x, p, rng);
#endif
  Tensor in = x.contiguous();
  Tensor mask = Tensor::empty(x.shape());  // 0 or 1/(1-p)
  Tensor out = Tensor::empty(x.shape());
  float keep_scale = 1.0f / (1.0f - p);
  float* m = mask.data<float>();
  const float* xi = in.data<float>();
  float* o = out.data<float>();
  // Random bits drawn serially from the caller's generator keep runs reproducible.
  const uint64_t threshold = static_cast<uint64_t>(static_cast<double>(p) * 4294967296.0);
  for (int64_t i = 0, n = x.numel(); i < n; i += 2) {
    uint64_t bits = rng.next_u64();
    m[i] = (bits & 0xffffffffu) < threshold ? 0.0f : keep_scale;
    if (i + 1 < n) m[i + 1] = (bits >> 32) < threshold ? 0.0f : keep_scale;
  }
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = xi[i] * m[i];
  autograd::record("dropout", out, {x}, [mask](const Tensor& g) {
    Tensor gc = g.contiguous();
    Tensor gi = Tensor::empty(g.shape());
    const float* gp = gc.data<float>();
    const float* mp = mask.data<float>();
    float* out_p = gi.data<float>();
    for (int64_t i = 0, n = g.numel(); i < n; ++i) out_p[i] = gp[i] * mp[i];
    return std::vector<Tensor>{gi};
  });
  return out;
}

}  // namespace dpt
