// Matrix products on CUDA with cuBLAS, the twin of backend/cpu/matmul.h: linear layers and
// plain 2-D matmul. Transposes are cuBLAS flags, never copies. TF32 per math_settings.h.
#pragma once

#include "core/tensor.h"

namespace dpt::cuda {

// Requires: a and b contiguous 2-D on one CUDA device, both f32 or both bf16 (tensor
// cores, f32 accumulation); op(a) [M, K] and op(b) [K, N], op(t) = t or its transpose;
// bias f32 [N] or undefined; out contiguous [M, N] of a's dtype.
// Ensures: out = op(a) op(b) (+ bias per row) (then max(0, .) when relu), every element
// written (K = 0 gives zeros, plus bias).
void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& bias,
            bool relu, const Tensor& out);

// Requires: t contiguous 2-D [M, N] f32 or bf16, out contiguous f32 [N]. Ensures: out[j] = sum_i t[i, j]
// (in double).
void sum_rows(const Tensor& t, const Tensor& out);

}  // namespace dpt::cuda
