// Differentiable dtype and layout conversion: how bf16 and channels-last enter a network
// (nn/compute.h); the backward casts the gradient back to the input's dtype and layout.
#pragma once

#include "core/tensor.h"

namespace dpt {

enum class MemoryFormat {
  preserve,       // x's own strides when dense, else contiguous
  contiguous,     // row-major (NCHW)
  channels_last,  // NHWC; 4-D only
};

// Requires: x defined; dtype f32, or bf16 with x on a CUDA device. Ensures: x's values in
// `dtype` (bf16: rounded to nearest even) and `format`; x itself when both already hold.
Tensor cast(const Tensor& x, DType dtype, MemoryFormat format = MemoryFormat::preserve);

// Requires: `converted` holds cast(x, ...)'s values, made earlier (cached bf16 weights).
// Ensures: a view of it recorded as that cast; no kernel runs in the forward.
Tensor cast_reuse(const Tensor& x, const Tensor& converted);

// Requires: src and dst of one shape on one device, dst dense; as cast's dtypes. Ensures:
// dst = src's values converted, in dst's own dtype and layout. Not recorded (a cache refill).
void cast_into(const Tensor& src, const Tensor& dst);

}  // namespace dpt
