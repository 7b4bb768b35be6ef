// cuBLAS GEMM for row-major tensors (see kernel_list.h). cuBLAS is column-major, and a
// row-major [M, N] matrix is its column-major transpose, so out = op(a) op(b) is computed
// as out^T = op(b)^T op(a)^T: the operands swap places and keep their transpose flags.
// bf16 operands run on tensor cores with f32 accumulation (CUBLAS_COMPUTE_32F); bias,
// ReLU and column sums then read and write bf16 through f32.
#include "backend/cuda/kernels.h"

#include <climits>

#include "backend/cuda/launch.h"
#include "backend/cuda/math_settings.h"

namespace dpt::cuda {
namespace {

template <class T>
__global__ void bias_relu_kernel(T* out, const float* bias, int64_t rows, int64_t cols, bool relu) {
  for (int64_t i = thread_index(); i < rows * cols; i += thread_count()) {
    float v = to_float(out[i]) + (bias ? bias[i % cols] : 0.0f);
    out[i] = from_float<T>(relu && !(v > 0.0f) ? 0.0f : v);
  }
}

// One thread per column walks the rows: neighbouring threads read neighbouring elements.
template <class T>
__global__ void sum_rows_kernel(const T* t, float* out, int64_t rows, int64_t cols) {
  for (int64_t j = thread_index(); j < cols; j += thread_count()) {
    double s = 0;
    for (int64_t i = 0; i < rows; ++i) s += to_float(t[i * cols + j]);
    out[j] = static_cast<float>(s);
  }
}

int blas_int(int64_t v) {
  DPT_CHECK(v <= INT_MAX) << "matmul on cuda: size " << v << " does not fit cuBLAS's int sizes";
  return static_cast<int>(v);
}

}  // namespace

void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& bias,
            bool relu, const Tensor& out) {
  DPT_CHECK(a.is_contiguous() && b.is_contiguous() && out.is_contiguous() && a.dim() == 2 && b.dim() == 2)
      << "matmul on cuda: needs contiguous 2-D operands";
  DPT_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype() && (!bias.defined() || bias.dtype() == DType::f32))
      << "matmul on cuda: operands and output of one dtype (f32 or bf16), bias f32; got "
      << dtype_name(a.dtype()) << ", " << dtype_name(b.dtype()) << " into " << dtype_name(out.dtype());
  const bool half = out.dtype() == DType::bf16;
  int64_t m = out.size(0), n = out.size(1), k = transpose_a ? a.size(0) : a.size(1);
  if (m == 0 || n == 0) return;
  int device = out.device().index;
  KernelScope scope(device);
  if (k == 0) {
    CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, out.numel() * dtype_size(out.dtype()), scope.stream()));
  } else {
    const float one = 1.0f, zero = 0.0f;
    cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    int lda = blas_int(transpose_a ? m : k), ldb = blas_int(transpose_b ? k : n);
    // bf16 data: f32 accumulation and f32 alpha/beta (the scale type of CUBLAS_COMPUTE_32F).
    cublasComputeType_t compute =
        !half && tf32_enabled() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cudaDataType_t type = half ? CUDA_R_16BF : CUDA_R_32F;
    CUBLAS_CHECK(cublasGemmEx(device_context(device).cublas(), op_b, op_a, blas_int(n), blas_int(m),
                              blas_int(k), &one, b.raw_data(), type, ldb, a.raw_data(), type, lda, &zero,
                              out.raw_data(), type, blas_int(n), compute, CUBLAS_GEMM_DEFAULT));
  }
  if (bias.defined() || relu) {
    const float* bias_data = bias.defined() ? bias.data<float>() : nullptr;
    dispatch_float(out.dtype(), "matmul", [&](auto tag) {
      using T = decltype(tag);
      bias_relu_kernel<<<grid_for(m * n), kBlock, 0, scope.stream()>>>(elements<T>(out), bias_data, m, n, relu);
    });
    DPT_CUDA_LAUNCH_CHECK();
  }
}

void sum_rows(const Tensor& t, const Tensor& out) {
  DPT_CHECK(t.is_contiguous() && t.dim() == 2 && out.numel() == t.size(1) && out.dtype() == DType::f32)
      << "sum_rows on cuda: needs contiguous [M, N] and f32 [N]";
  int64_t rows = t.size(0), cols = t.size(1);
  if (cols == 0) return;
  KernelScope scope(out.device().index);
  dispatch_float(t.dtype(), "sum_rows", [&](auto tag) {
    using T = decltype(tag);
    sum_rows_kernel<<<grid_for(cols), kBlock, 0, scope.stream()>>>(elements<T>(t), out.data<float>(), rows, cols);
  });
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace dpt::cuda
