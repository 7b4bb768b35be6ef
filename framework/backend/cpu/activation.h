// Plain-loop ReLU kernels. The backward reads the forward output: out > 0 is the mask.
#pragma once

#include <cstdint>

namespace dpt::cpu {

void relu_forward(const float* x, float* out, int64_t n);
// grad_in = out > 0 ? grad_out : 0. grad_in may alias grad_out.
void relu_backward(const float* out, const float* grad_out, float* grad_in, int64_t n);

}  // namespace dpt::cpu
