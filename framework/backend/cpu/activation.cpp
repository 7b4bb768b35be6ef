#include "backend/cpu/activation.h"

namespace dpt::cpu {

void relu_forward(const float* x, float* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void add_relu_forward(const float* a, const float* b, float* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    float s = a[i] + b[i];
    out[i] = s > 0.0f ? s : 0.0f;
  }
}

void relu_backward(const float* out, const float* grad_out, float* grad_in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) grad_in[i] = out[i] > 0.0f ? grad_out[i] : 0.0f;
}

}  // namespace dpt::cpu
