// ReLU on CUDA, the twin of backend/cpu/activation.h, and the residual sum fused with its
// ReLU. The backward reads the forward output (out > 0 is the mask), which also serves
// add_relu and the ReLU fused into conv, linear and BN.
#pragma once

#include "core/tensor.h"

namespace dpt::cuda {

// Requires: x and out f32 (or both bf16) on one CUDA device, dense with the same shape and
// strides, size-1 dimensions aside (layout.h same_dense_layout); out may be x.
// Ensures: out = max(x, 0).
void relu_forward(const Tensor& x, const Tensor& out);
// Requires: a, b and out alike, as above (NCHW, channels-last or any other dense layout, as
// long as all three share it); out may be a or b. Ensures: out = max(a + b, 0), summed in f32
// and rounded once; a NaN sum gives 0, as relu_forward does.
void add_relu_forward(const Tensor& a, const Tensor& b, const Tensor& out);
// Requires: out, grad_out and grad_in alike, as above; grad_in may be grad_out.
// Ensures: grad_in = out > 0 ? grad_out : 0.
void relu_backward(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in);
// The same into a new tensor: the backward of a ReLU fused into conv, linear or BN.
Tensor relu_backward(const Tensor& out, const Tensor& grad_out);

}  // namespace dpt::cuda
