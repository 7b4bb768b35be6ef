// Whole-tensor reductions to a one-element tensor of shape [].
#pragma once

#include "core/tensor.h"

namespace dpt {

Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);

}  // namespace dpt
