// Dtype and layout conversion on CUDA: the kernel behind ops/cast.h (f32 <-> bf16 for mixed
// precision, NCHW <-> NHWC for channels-last), in one pass over the elements.
#pragma once

#include "core/tensor.h"

namespace dpt::cuda {

// Requires: src and dst of one shape (at most 8 dimensions) on one CUDA device, each f32
// or bf16; src any strides, dst dense. Ensures: every element of dst = src's, converted
// (to bf16: rounded to nearest, ties to even). One flat pass when both share dense strides.
void cast_copy(const Tensor& src, const Tensor& dst);

}  // namespace dpt::cuda
