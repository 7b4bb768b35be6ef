// Differentiable matrix products: the fully connected layer (bias and ReLU fused) and a
// plain 2-D matmul. Both run on oneDNN's matmul (backend/cpu/matmul.cpp).
#pragma once

#include "core/tensor.h"

namespace dpt {

// Requires: x [N, in], w [out, in] f32 tensors on one device, or both bf16 on a CUDA device
// (output bf16: tensor cores, f32 accumulation); bias f32 [out] or undefined.
// Ensures: [N, out] = x w^T + bias, then max(0, .) when fuse_relu; recorded for autograd,
// whose backward computes only the gradients some input needs.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias, bool fuse_relu = false);

// Requires: a [M, K], b [K, N] f32 CPU tensors.
// Ensures: [M, N] = a b; recorded for autograd.
Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace dpt
