// What the kernel files (.cu) share: the block size, grid sizes for grid-stride loops with
// 64-bit indices, the scope every launch runs in (device made current, its compute stream),
// block-wide sums, and the element types a kernel may be instantiated for (f32, bf16) with
// their conversions and the host-side dispatch on a tensor's dtype. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device.h"
#include "core/tensor.h"

namespace dpt::cuda {

using bf16 = __nv_bfloat16;

// Loads widen to f32 and stores round to nearest even: kernels compute in f32 whatever
// they read and write.
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bf16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) {
  return __float2bfloat16_rn(v);
}

template <class T>
constexpr DType dtype_of_element() {
  return std::is_same_v<T, bf16> ? DType::bf16 : DType::f32;
}

// The element pointer of a tensor of kernel type T (float or bf16); Error if the dtype differs.
template <class T>
T* elements(const Tensor& t) {
  DPT_CHECK(t.dtype() == dtype_of_element<T>()) << "cuda kernel for " << dtype_name(dtype_of_element<T>())
                                                << " given a " << dtype_name(t.dtype()) << " tensor";
  return static_cast<T*>(t.raw_data());
}

// Calls f(T{}) with T = float for f32 and bf16 for bf16 tensors; Error naming `op` otherwise.
template <class F>
void dispatch_float(DType dtype, const char* op, F&& f) {
  if (dtype == DType::f32) return f(float{});
  if (dtype == DType::bf16) return f(bf16{});
  DPT_FAIL() << op << " on cuda: expected f32 or bf16, got " << dtype_name(dtype);
}

// Calls f(std::true_type{}) or f(std::false_type{}): a runtime flag (a layout, a kind) made
// a template argument.
template <class F>
void dispatch_bool(bool flag, F&& f) {
  if (flag) return f(std::true_type{});
  f(std::false_type{});
}

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

// The launch most entries make: nothing when n == 0; else launch(T{}, stream) in a
// KernelScope of `device`, T the kernel type of `dtype` (dispatch_float), then the check.
template <class F>
void launch_typed(int device, DType dtype, const char* op, int64_t n, F&& launch) {
  if (n == 0) return;
  KernelScope scope(device);
  dispatch_float(dtype, op, [&](auto tag) { launch(tag, scope.stream()); });
  DPT_CUDA_LAUNCH_CHECK();
}

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
