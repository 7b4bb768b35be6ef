// ReLU as its own op (convolutions and linear layers can also fuse it, see conv.h/linear.h).
#pragma once

#include "core/tensor.h"

namespace dpt {

Tensor relu(const Tensor& x);

}  // namespace dpt
