// ResNet's option-A shortcut on the CPU: strided copies over whole (n, c) planes, too small
// a job for a oneDNN primitive, so plain loops. NCHW-contiguous, or channels-last when
// both tensors are (the residual add then runs on two channels-last tensors).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dpt::cpu {

// Requires: x [N, C, H, W] and out [N, OC >= C, ceil(H/stride), ceil(W/stride)] f32, both
// contiguous or both channels-last. Ensures: out[:, :C] = x[:, :, ::stride, ::stride], the
// other channels 0.
void shortcut_pad_forward(const Tensor& x, int64_t stride, const Tensor& out);
// Requires: grad_out and grad_x as out and x above. Ensures: grad_x = the gradient of the
// forward (grad_out's first C channels at the sampled positions, 0 elsewhere).
void shortcut_pad_backward(const Tensor& grad_out, int64_t stride, const Tensor& grad_x);

}  // namespace dpt::cpu
