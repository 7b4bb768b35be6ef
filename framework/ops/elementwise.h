// Differentiable elementwise arithmetic with numpy-style broadcasting.
#pragma once

#include "core/tensor.h"

namespace dpt {

// Requires: a and b broadcast (trailing dimensions equal or 1). Ensures: output has the
// broadcast shape; gradients are summed back to each input's shape.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// a * scale + shift.
Tensor affine(const Tensor& a, float scale, float shift = 0.0f);
Tensor mul(const Tensor& a, float scale);

}  // namespace dpt
