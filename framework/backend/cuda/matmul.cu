// cuBLAS GEMM for row-major tensors (see matmul.h). cuBLAS is column-major, and a
// row-major [M, N] matrix is its column-major transpose, so out = op(a) op(b) is computed
// as out^T = op(b)^T op(a)^T: the operands swap places and keep their transpose flags.
#include "backend/cuda/matmul.h"

#include <climits>

#include "backend/cuda/launch.h"
#include "backend/cuda/tf32.h"

namespace dpt::cuda {
namespace {

__global__ void bias_relu_kernel(float* out, const float* bias, int64_t rows, int64_t cols, bool relu) {
  for (int64_t i = thread_index(); i < rows * cols; i += thread_count()) {
    float v = out[i] + (bias ? bias[i % cols] : 0.0f);
    out[i] = relu && !(v > 0.0f) ? 0.0f : v;
  }
}

// One thread per column walks the rows: neighbouring threads read neighbouring floats.
__global__ void sum_rows_kernel(const float* t, float* out, int64_t rows, int64_t cols) {
  for (int64_t j = thread_index(); j < cols; j += thread_count()) {
    double s = 0;
    for (int64_t i = 0; i < rows; ++i) s += t[i * cols + j];
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
  int64_t m = out.size(0), n = out.size(1), k = transpose_a ? a.size(0) : a.size(1);
  if (m == 0 || n == 0) return;
  int device = out.device().index;
  KernelScope scope(device);
  if (k == 0) {
    CUDA_CHECK(cudaMemsetAsync(out.data<float>(), 0, out.numel() * sizeof(float), scope.stream()));
  } else {
    const float one = 1.0f, zero = 0.0f;
    cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    int lda = blas_int(transpose_a ? m : k), ldb = blas_int(transpose_b ? k : n);
    cublasComputeType_t compute = tf32_enabled() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasGemmEx(device_context(device).cublas(), op_b, op_a, blas_int(n), blas_int(m),
                              blas_int(k), &one, b.data<float>(), CUDA_R_32F, ldb, a.data<float>(),
                              CUDA_R_32F, lda, &zero, out.data<float>(), CUDA_R_32F, blas_int(n), compute,
                              CUBLAS_GEMM_DEFAULT));
  }
  if (bias.defined() || relu) {
    bias_relu_kernel<<<grid_for(m * n), kBlock, 0, scope.stream()>>>(
        out.data<float>(), bias.defined() ? bias.data<float>() : nullptr, m, n, relu);
    DPT_CUDA_LAUNCH_CHECK();
  }
}

void sum_rows(const Tensor& t, const Tensor& out) {
  DPT_CHECK(t.is_contiguous() && t.dim() == 2 && out.numel() == t.size(1))
      << "sum_rows on cuda: needs contiguous [M, N] and [N]";
  int64_t rows = t.size(0), cols = t.size(1);
  if (cols == 0) return;
  KernelScope scope(out.device().index);
  sum_rows_kernel<<<grid_for(cols), kBlock, 0, scope.stream()>>>(t.data<float>(), out.data<float>(), rows,
                                                                 cols);
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace dpt::cuda
