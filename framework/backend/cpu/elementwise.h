// Plain-loop elementwise kernels on contiguous f32 arrays, parallel with OpenMP.
#pragma once

#include <cstdint>

namespace dpt::cpu {

void add_inplace(float* dst, const float* src, int64_t n);  // dst += src

}  // namespace dpt::cpu
