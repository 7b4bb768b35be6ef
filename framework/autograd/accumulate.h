// Gradient sums used by the engine: adding two gradients that reach the same node, and
// accumulating into a leaf's .grad (`+=` into the existing tensor, so a .grad that is a
// view into a DDP bucket stays one).
#pragma once

#include "core/tensor.h"

namespace dpt::autograd {

Tensor add_gradients(const Tensor& a, const Tensor& b);
// leaf.grad += grad (or a private copy of grad when .grad is undefined), then the hooks.
void accumulate_into_leaf(const Tensor& leaf, const Tensor& grad);

}  // namespace dpt::autograd
