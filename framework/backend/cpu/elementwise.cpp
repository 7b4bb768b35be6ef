#include "backend/cpu/elementwise.h"

namespace dpt::cpu {

void add_inplace(float* dst, const float* src, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace dpt::cpu
