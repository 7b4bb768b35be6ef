// cuDNN pooling and the global-average kernels (see pool.h). Max pooling uses cuDNN's
// deterministic mode, so a run's gradients do not depend on the order atomics land in.
#include "backend/cuda/pool.h"

#include "backend/cuda/cudnn_desc.h"
#include "backend/cuda/launch.h"

namespace dpt::cuda {
namespace {

constexpr int kPlanesPerBlock = kBlock / kWarp;

// One warp per (n, c) plane.
__global__ void global_avg_forward_kernel(const float* x, float* out, int64_t planes, int64_t hw) {
  int lane = threadIdx.x % kWarp;
  for (int64_t plane = static_cast<int64_t>(blockIdx.x) * kPlanesPerBlock + threadIdx.x / kWarp;
       plane < planes; plane += static_cast<int64_t>(gridDim.x) * kPlanesPerBlock) {
    double s = 0;
    for (int64_t j = lane; j < hw; j += kWarp) s += x[plane * hw + j];
    s = warp_sum(s);
    if (lane == 0) out[plane] = static_cast<float>(s / static_cast<double>(hw));
  }
}

__global__ void global_avg_backward_kernel(const float* grad_out, float* grad_x, int64_t total, int64_t hw) {
  const float inv = 1.0f / static_cast<float>(hw);
  for (int64_t i = thread_index(); i < total; i += thread_count()) grad_x[i] = grad_out[i / hw] * inv;
}

cudnnPoolingMode_t mode_of(PoolKind kind) {
  return kind == PoolKind::max ? CUDNN_POOLING_MAX_DETERMINISTIC
                               : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
}

void check_contiguous(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    DPT_CHECK(t->dim() == 4 && t->is_contiguous())
        << "pool2d on cuda: needs contiguous NCHW tensors, got " << shape_str(t->shape());
}

}  // namespace

void pool2d_forward(PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out) {
  check_contiguous({&x, &out});
  if (out.numel() == 0) return;
  int device = x.device().index;
  DeviceGuard guard(device);
  PoolingDescriptor pool(mode_of(kind), p.kernel, p.stride, p.padding);
  TensorDescriptor xd(x.shape(), "pool2d"), yd(out.shape(), "pool2d");
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnPoolingForward(device_context(device).cudnn(), pool.get(), &one, xd.get(), x.data<float>(),
                                  &zero, yd.get(), out.data<float>()));
}

void pool2d_backward(PoolKind kind, const Tensor& x, const Tensor& out, const Tensor& grad_out,
                     const PoolParams& p, const Tensor& grad_x) {
  check_contiguous({&x, &out, &grad_out, &grad_x});
  if (grad_x.numel() == 0) return;
  int device = x.device().index;
  DeviceGuard guard(device);
  PoolingDescriptor pool(mode_of(kind), p.kernel, p.stride, p.padding);
  TensorDescriptor xd(x.shape(), "pool2d"), yd(out.shape(), "pool2d");
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnPoolingBackward(device_context(device).cudnn(), pool.get(), &one, yd.get(),
                                   out.data<float>(), yd.get(), grad_out.data<float>(), xd.get(),
                                   x.data<float>(), &zero, xd.get(), grad_x.data<float>()));
}

void global_avg_pool2d_forward(const Tensor& x, const Tensor& out) {
  check_contiguous({&x});
  DPT_CHECK(out.is_contiguous()) << "global_avg_pool2d on cuda: the output must be contiguous";
  int64_t planes = x.size(0) * x.size(1), hw = x.size(2) * x.size(3);
  if (planes == 0) return;
  KernelScope scope(x.device().index);
  global_avg_forward_kernel<<<grid_for(planes, kPlanesPerBlock), kBlock, 0, scope.stream()>>>(
      x.data<float>(), out.data<float>(), planes, hw);
  DPT_CUDA_LAUNCH_CHECK();
}

void global_avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x) {
  check_contiguous({&grad_x});
  DPT_CHECK(grad_out.is_contiguous()) << "global_avg_pool2d on cuda: the output gradient must be contiguous";
  int64_t total = grad_x.numel(), hw = grad_x.size(2) * grad_x.size(3);
  if (total == 0) return;
  KernelScope scope(grad_x.device().index);
  global_avg_backward_kernel<<<grid_for(total), kBlock, 0, scope.stream()>>>(grad_out.data<float>(),
                                                                             grad_x.data<float>(), total, hw);
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace dpt::cuda
