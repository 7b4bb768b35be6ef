// The option-A ResNet shortcut on CUDA (ops/shortcut_pad.h): subsample by `stride` and pad
// the new channels with zeros, and its backward. f32 or bf16, contiguous NCHW or
// channels-last NHWC; both tensors of a call share the dtype and the layout.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dpt::cuda {

// Requires: x [N, C, H, W], out [N, OC, ceil(H/s), ceil(W/s)] with OC >= C, as above, on
// one CUDA device. Ensures: out[:, c < C] = x[:, c, ::s, ::s], out[:, c >= C] = 0.
void shortcut_pad_forward(const Tensor& x, int64_t stride, const Tensor& out);
// Requires: grad_out like out above, grad_x like x. Ensures: grad_x at the sampled
// positions = grad_out[:, c < C], 0 elsewhere; every element written.
void shortcut_pad_backward(const Tensor& grad_out, int64_t stride, const Tensor& grad_x);

}  // namespace dpt::cuda
