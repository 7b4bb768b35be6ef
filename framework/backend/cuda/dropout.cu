// The dropout kernel: splitmix64 of (seed, pair index) gives 64 bits, the low half for the
// even element of the pair and the high half for the odd one, as the CPU uses each 64-bit
// draw for two elements. The seed is one draw of the caller's Rng per call.
#include "backend/cuda/kernels.h"

#include "backend/cuda/launch.h"

namespace dpt::cuda {
namespace {

__device__ inline uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void dropout_kernel(const float* x, float* mask, float* out, int64_t n, uint64_t seed,
                               uint64_t threshold, float keep_scale) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    uint64_t bits = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(i / 2)));
    uint64_t half = i % 2 == 0 ? (bits & 0xffffffffull) : (bits >> 32);
    float m = half < threshold ? 0.0f : keep_scale;
    mask[i] = m;
    out[i] = x[i] * m;
  }
}

}  // namespace

void dropout_forward(const Tensor& x, float p, Rng& rng, const Tensor& mask, const Tensor& out) {
  const uint64_t seed = rng.next_u64();
  DPT_CHECK(x.is_contiguous() && mask.is_contiguous() && out.is_contiguous() && x.shape() == out.shape() &&
            mask.shape() == out.shape())
      << "dropout on cuda: needs contiguous x, mask and out of one shape";
  int64_t n = x.numel();
  if (n == 0) return;
  const uint64_t threshold = static_cast<uint64_t>(static_cast<double>(p) * 4294967296.0);
  KernelScope scope(x.device().index);
  dropout_kernel<<<grid_for(n), kBlock, 0, scope.stream()>>>(
      x.data<float>(), mask.data<float>(), out.data<float>(), n, seed, threshold, 1.0f / (1.0f - p));
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace dpt::cuda
