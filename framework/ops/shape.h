// Differentiable reshapes. They share storage with the input when it is contiguous.
#pragma once

#include "core/tensor.h"

namespace dpt {

// One entry of `shape` may be -1 (inferred).
Tensor reshape(const Tensor& x, Shape shape);
// Collapses dimensions start_dim.. into one: [N, C, H, W] -> [N, C*H*W] for start_dim 1.
Tensor flatten(const Tensor& x, int64_t start_dim = 1);

}  // namespace dpt
