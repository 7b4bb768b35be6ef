// ReLU kernels (see activation.h): flat loops over dense buffers.
#include "backend/cuda/activation.h"

#include "backend/cuda/launch.h"

namespace dpt::cuda {
namespace {

__global__ void relu_forward_kernel(const float* x, float* out, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_backward_kernel(const float* out, const float* grad_out, float* grad_in, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    grad_in[i] = out[i] > 0.0f ? grad_out[i] : 0.0f;
}

void check_alike(const char* what, const Tensor& a, const Tensor& b) {
  DPT_CHECK(a.shape() == b.shape() && a.strides() == b.strides() && a.is_dense())
      << what << " on cuda: needs dense tensors of one shape and layout, got " << shape_str(a.shape())
      << " and " << shape_str(b.shape());
}

}  // namespace

void relu_forward(const Tensor& x, const Tensor& out) {
  check_alike("relu", x, out);
  int64_t n = out.numel();
  if (n == 0) return;
  KernelScope scope(out.device().index);
  relu_forward_kernel<<<grid_for(n), kBlock, 0, scope.stream()>>>(x.data<float>(), out.data<float>(), n);
  DPT_CUDA_LAUNCH_CHECK();
}

void relu_backward(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in) {
  check_alike("relu backward", out, grad_out);
  check_alike("relu backward", out, grad_in);
  int64_t n = out.numel();
  if (n == 0) return;
  KernelScope scope(out.device().index);
  relu_backward_kernel<<<grid_for(n), kBlock, 0, scope.stream()>>>(out.data<float>(), grad_out.data<float>(),
                                                                   grad_in.data<float>(), n);
  DPT_CUDA_LAUNCH_CHECK();
}

Tensor relu_backward(const Tensor& out, const Tensor& grad_out) {
  Tensor grad_in = Tensor::empty_like(out);
  relu_backward(out, grad_out, grad_in);
  return grad_in;
}

}  // namespace dpt::cuda
