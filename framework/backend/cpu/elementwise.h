// Plain-loop elementwise kernels on CPU tensors, parallel with OpenMP. Binary ops
// broadcast numpy-style; the output is contiguous with the broadcast shape (or keeps
// the inputs' layout when both share one dense layout).
#pragma once

#include <cstdint>

#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::cpu {

void add_inplace(float* dst, const float* src, int64_t n);  // dst += src

// out = a op b, out contiguous with the broadcast shape of a and b, or, when a and b
// have the same shape and the same dense strides, out may have those strides too.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// out = a * scale + shift, elementwise.
void affine(const Tensor& a, float scale, float shift, const Tensor& out);
// Sums `t` over the dimensions that broadcasting expanded, giving `shape`.
Tensor sum_to_shape(const Tensor& t, const Shape& shape);

}  // namespace dpt::cpu
