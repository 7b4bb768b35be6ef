// Plain-loop ReLU kernels, and the residual sum fused with its ReLU. The backward reads the
// forward output: out > 0 is the mask, so relu_backward also serves add_relu.
#pragma once

#include <cstdint>

namespace dpt::cpu {

void relu_forward(const float* x, float* out, int64_t n);
// out = max(a + b, 0) in one pass; a NaN sum gives 0, as relu_forward does. out may alias a or b.
void add_relu_forward(const float* a, const float* b, float* out, int64_t n);
// grad_in = out > 0 ? grad_out : 0. grad_in may alias grad_out.
void relu_backward(const float* out, const float* grad_out, float* grad_in, int64_t n);

}  // namespace dpt::cpu
