// ReLU as its own op (convolutions and linear layers can also fuse it, see conv.h/linear.h),
// and the residual sum fused with the ReLU that follows it.
#pragma once

#include "core/tensor.h"

namespace dpt {

Tensor relu(const Tensor& x);

// relu(add(a, b)) in one pass forward and one backward, without the sum as a temporary: the
// end of a ResNet BasicBlock. Requires: a and b of one shape (no broadcasting), dtype and
// device. Ensures: max(a + b, 0), NaN sums giving 0 as relu does; both inputs receive the
// same gradient, (out > 0) ? g : 0. Inputs of different layouts run as relu(add(a, b)).
Tensor add_relu(const Tensor& a, const Tensor& b);

}  // namespace dpt
