// Whole-tensor sums on CUDA (ops/reduce.h's sum and mean) and the broadcast of a scalar
// gradient back over a tensor. The scalar stays on the device: nothing here waits for the GPU.
#pragma once

#include "core/tensor.h"

namespace dpt::cuda {

// Requires: x f32 (any strides), out a one-element f32 tensor, both on one CUDA device.
// Ensures: out = scale * sum(x), accumulated in double in a fixed order (deterministic).
void sum_scaled(const Tensor& x, double scale, const Tensor& out);
// Requires: scalar a one-element f32 tensor, out dense f32, on one CUDA device.
// Ensures: every element of out = scalar * scale (the product rounded to f32 once, as the
// CPU's Tensor::full(shape, g.item() * scale) does).
void fill_scaled(const Tensor& out, const Tensor& scalar, float scale);

}  // namespace dpt::cuda
