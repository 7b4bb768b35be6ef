// Two-pass sum: each block leaves its partial sum (double) in a scratch buffer, then one
// block adds the partials in index order. No atomics, so the result does not depend on
// which blocks finish first.
#include "backend/cuda/kernels.h"

#include "backend/cuda/allocator.h"
#include "backend/cuda/launch.h"

namespace dpt::cuda {
namespace {

constexpr unsigned kMaxPartials = 1024;

__global__ void partial_sums_kernel(const float* x, int64_t n, double* partial) {
  double s = 0;
  for (int64_t i = thread_index(); i < n; i += thread_count()) s += x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void finish_sum_kernel(const double* partial, unsigned count, double scale, float* out) {
  double s = 0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) out[0] = static_cast<float>(s * scale);
}

__global__ void fill_scaled_kernel(float* out, int64_t n, const float* scalar, float scale) {
  const float v = scalar[0] * scale;
  for (int64_t i = thread_index(); i < n; i += thread_count()) out[i] = v;
}

}  // namespace

void sum_scaled(const Tensor& x, double scale, const Tensor& out) {
  DPT_CHECK(out.numel() == 1) << "sum on cuda: the output must have one element";
  Tensor src = contiguous(x);
  int64_t n = src.numel();
  int device = out.device().index;
  unsigned blocks = n == 0 ? 1 : std::min(grid_for(n), kMaxPartials);
  DeviceBuffer partial(blocks * sizeof(double), device);
  KernelScope scope(device);
  partial_sums_kernel<<<blocks, kBlock, 0, scope.stream()>>>(src.data<float>(), n, partial.as<double>());
  DPT_CUDA_LAUNCH_CHECK();
  finish_sum_kernel<<<1, kBlock, 0, scope.stream()>>>(partial.as<double>(), blocks, scale, out.data<float>());
  DPT_CUDA_LAUNCH_CHECK();
}

void fill_scaled(const Tensor& out, const Tensor& scalar, float scale) {
  DPT_CHECK(scalar.numel() == 1 && out.is_dense())
      << "fill_scaled on cuda: needs a one-element scalar and a dense output";
  int64_t n = out.numel();
  if (n == 0) return;
  KernelScope scope(out.device().index);
  fill_scaled_kernel<<<grid_for(n), kBlock, 0, scope.stream()>>>(out.data<float>(), n, scalar.data<float>(),
                                                                 scale);
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace dpt::cuda
