// ReLU and add + ReLU kernels (see kernel_list.h): flat loops over dense buffers, f32 or bf16.
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/layout.h"

namespace dpt::cuda {
namespace {

template <class T>
__global__ void relu_forward_kernel(const T* x, T* out, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    float v = to_float(x[i]);
    out[i] = from_float<T>(v > 0.0f ? v : 0.0f);
  }
}

template <class T>
__global__ void add_relu_forward_kernel(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    float v = to_float(a[i]) + to_float(b[i]);
    out[i] = from_float<T>(v > 0.0f ? v : 0.0f);
  }
}

template <class T>
__global__ void relu_backward_kernel(const T* out, const T* grad_out, T* grad_in, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    grad_in[i] = to_float(out[i]) > 0.0f ? grad_out[i] : from_float<T>(0.0f);
}

void check_alike(const char* what, const Tensor& a, const Tensor& b) {
  DPT_CHECK(same_dense_layout(a, b) && a.dtype() == b.dtype())
      << what << " on cuda: needs dense tensors of one shape, layout and dtype, got " << shape_str(a.shape())
      << " " << dtype_name(a.dtype()) << " and " << shape_str(b.shape()) << " " << dtype_name(b.dtype());
}

}  // namespace

void relu_forward(const Tensor& x, const Tensor& out) {
  check_alike("relu", x, out);
  int64_t n = out.numel();
  launch_typed(out.device().index, out.dtype(), "relu", n, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    relu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(elements<T>(x), elements<T>(out), n);
  });
}

void add_relu_forward(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_alike("add_relu", a, out);
  check_alike("add_relu", b, out);
  int64_t n = out.numel();
  launch_typed(out.device().index, out.dtype(), "add_relu", n, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    add_relu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(elements<T>(a), elements<T>(b),
                                                                elements<T>(out), n);
  });
}

void relu_backward(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in) {
  check_alike("relu backward", out, grad_out);
  check_alike("relu backward", out, grad_in);
  int64_t n = out.numel();
  launch_typed(out.device().index, out.dtype(), "relu backward", n, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    relu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(elements<T>(out), elements<T>(grad_out),
                                                             elements<T>(grad_in), n);
  });
}

}  // namespace dpt::cuda
