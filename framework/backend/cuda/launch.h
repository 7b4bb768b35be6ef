// What the kernel files (.cu) share: the block size, grid sizes for grid-stride loops with
// 64-bit indices, the scope every launch runs in (device made current, its compute stream)
// and block-wide sums. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device.h"

namespace dpt::cuda {

constexpr int kBlock = 256;  // threads per block, a multiple of the warp size
constexpr int kWarp = 32;

// Blocks for a grid-stride loop over n > 0 items, kBlock per block: enough to fill an
// H100 (132 SMs x 16 blocks of 256), no more; each thread then loops over the rest.
inline unsigned grid_for(int64_t n, int64_t per_block = kBlock) {
  return static_cast<unsigned>(std::min<int64_t>((n + per_block - 1) / per_block, 4096));
}

// A launch's surroundings: `device` current for the scope, and the stream every kernel,
// copy and library call on it is queued on (so they run in program order).
class KernelScope {
 public:
  explicit KernelScope(int device) : guard_(device), stream_(compute_stream(device)) {}
  cudaStream_t stream() const { return stream_; }

 private:
  DeviceGuard guard_;
  cudaStream_t stream_;
};

// After every <<<...>>>: a bad configuration or a sticky error from an earlier kernel
// surfaces here, at its launch, as a dpt::Error.
#define DPT_CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

__device__ inline int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t thread_count() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__device__ inline double warp_sum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// Requires: every thread of the block calls it, blockDim.x a multiple of 32. Ensures: the
// block's sum in thread 0 (other threads get partial sums). Safe to call repeatedly.
__device__ inline double block_sum(double v) {
  __shared__ double partial[32];
  __syncthreads();  // a previous call's readers are done with `partial`
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / kWarp ? partial[threadIdx.x] : 0.0;
  if (warp == 0) v = warp_sum(v);
  return v;
}

}  // namespace dpt::cuda
