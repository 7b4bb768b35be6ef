// Whole-tensor sums on the CPU (ops/reduce.h's sum and mean) and the broadcast of a scalar
// that is their backward.
#pragma once

#include "core/tensor.h"

namespace dpt::cpu {

// out (one element) = scale * the sum of x's elements, added in double in fixed-size chunks
// in chunk order: the same bits whatever the thread count.
void sum_scaled(const Tensor& x, double scale, const Tensor& out);
// Every element of out (contiguous) = scalar (one element) * scale.
void fill_scaled(const Tensor& out, const Tensor& scalar, float scale);

}  // namespace dpt::cpu
