// Elementwise CUDA kernels, the twins of backend/cpu/elementwise.h: binary arithmetic with
// numpy-style broadcasting, affine maps, in-place accumulation, the sum that undoes a
// broadcast, and strided-to-contiguous copies. The tensors of one call are all f32 or all
// bf16 (computed in f32) on one CUDA device; work is queued on that device's compute
// stream, not waited for.
#pragma once

#include <cstdint>

#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::cuda {


// Requires: a, b broadcastable, any strides, at most 8 dimensions; out contiguous with the
// broadcast shape, or, when a and b have the same shape and the same dense strides, out
// with those strides too. Ensures: out = a op b, every element written.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// Requires: out contiguous, a of out's shape (any strides). Ensures: out = a * scale + shift.
void affine(const Tensor& a, float scale, float shift, const Tensor& out);
// Requires: dst and src dense with the same shape and strides. Ensures: dst += src.
void add_inplace(const Tensor& dst, const Tensor& src);
// Requires: `shape` broadcasts to t's shape. Ensures: a new contiguous tensor of `shape`,
// t summed over the broadcast dimensions (in double); t itself when the shapes are equal.
Tensor sum_to_shape(const Tensor& t, const Shape& shape);
// t itself when contiguous, else a contiguous copy (any strides, at most 8 dimensions,
// any dtype). The CUDA twin of Tensor::contiguous(), which copies on the CPU only.
Tensor contiguous(const Tensor& t);

}  // namespace dpt::cuda
