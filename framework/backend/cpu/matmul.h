// Matrix products on CPU with oneDNN's matmul primitive, which serves both linear layers
// and plain 2-D matmul. Transposes are strides, never copies.
#pragma once

#include "core/tensor.h"

namespace dpt::cpu {

// Requires: a and b contiguous 2-D f32; op(a) [M, K] and op(b) [K, N], where op(t) is t
// or its transpose; bias [N] or undefined; out contiguous [M, N].
// Ensures: out = op(a) op(b) (+ bias per row) (then max(0, .) when relu), every element
// written.
void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& bias,
            bool relu, const Tensor& out);

// Requires: t contiguous 2-D [M, N] f32, out contiguous [N].
// Ensures: out[j] = sum_i t[i, j] (a linear layer's bias gradient).
void sum_rows(const Tensor& t, const Tensor& out);

}  // namespace dpt::cpu
