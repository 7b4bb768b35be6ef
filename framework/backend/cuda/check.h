// Every CUDA, cuBLAS, cuDNN and NCCL return code goes through one of these macros, as
// llm.c's cudaCheck does: a failure throws dpt::Error naming file:line, the call and the
// library's own error string, e.g. "CUDA error at stream.cpp:12: cudaStreamCreate(&s): out of memory".
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

namespace dpt::cuda::detail {

// Throws dpt::Error; out of line so that each macro expands to a compare and a call.
[[noreturn]] void check_failed(const char* library, const char* call, const char* file, int line, int code,
                               const char* text);

}  // namespace dpt::cuda::detail

#define DPT_CUDA_DETAIL_CHECK(library, type, ok, to_string, call)                                           \
  do {                                                                                                      \
    type dpt_check_status_ = (call);                                                                        \
    if (dpt_check_status_ != (ok))                                                                          \
      ::dpt::cuda::detail::check_failed(library, #call, __FILE__, __LINE__,                                 \
                                        static_cast<int>(dpt_check_status_), to_string(dpt_check_status_)); \
  } while (0)

// CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDefault));
#define CUDA_CHECK(call) DPT_CUDA_DETAIL_CHECK("CUDA", cudaError_t, cudaSuccess, cudaGetErrorString, call)
#define CUBLAS_CHECK(call) \
  DPT_CUDA_DETAIL_CHECK("cuBLAS", cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasGetStatusString, call)
#define CUDNN_CHECK(call) \
  DPT_CUDA_DETAIL_CHECK("cuDNN", cudnnStatus_t, CUDNN_STATUS_SUCCESS, cudnnGetErrorString, call)
#define NCCL_CHECK(call) DPT_CUDA_DETAIL_CHECK("NCCL", ncclResult_t, ncclSuccess, ncclGetErrorString, call)
