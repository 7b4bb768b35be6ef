// The tests' kernels and their launches (see cuda_fill.h).
#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device.h"
#include "cuda_fill.h"

namespace dpt::testing {
namespace {

__global__ void fill_kernel(float* data, int64_t n, float value) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    data[i] = value;
}

// Spins until the device's global timer has advanced by `ns`.
__global__ void spin_kernel(uint64_t ns) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

}  // namespace

void cuda_spin(double seconds, int device) {
  cudaStream_t stream = cuda::compute_stream(device);
  cuda::DeviceGuard guard(device);
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(seconds * 1e9));
  CUDA_CHECK(cudaGetLastError());
}

void cuda_fill(float* data, int64_t n, float value, int device) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  // A grid-stride loop: enough blocks to fill the GPU, no more.
  int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65536));
  cudaStream_t stream = cuda::compute_stream(device);
  cuda::DeviceGuard guard(device);
  fill_kernel<<<blocks, kThreads, 0, stream>>>(data, n, value);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpt::testing
