// 2-D convolution on CPU with oneDNN: forward with bias and ReLU fused, and the backward
// passes for data and for weights (+bias). Activations are NCHW-contiguous or
// channels-last (NHWC strides), each tensor's own layout read from its strides; weights
// are plain OIHW. A channels-last output makes the kernels work in nhwc (see conv.cpp).
#pragma once

#include <cstdint>

#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::cpu {

// Requires: f32 CPU tensors, x and out contiguous or channels-last, w and bias
// contiguous; x [N, C, H, W], w [OC, C/groups, KH, KW],
// bias [OC] or undefined, out [N, OC, OH, OW] with OH = (H + 2p - d(KH-1) - 1)/s + 1.
// Ensures: out = conv(x, w) + bias, then max(0, .) when relu. Every element of out is
// written (no need to zero it).
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p, bool relu,
                    const Tensor& out);

// Requires: x_shape, w_shape and grad_out [N, OC, OH, OW] as in conv2d_forward (grad_out,
// x and grad_x contiguous or channels-last, x and grad_x in the same layout); grad_out
// is the gradient at the convolution's output (already masked where ReLU was fused);
// x defined when grad_w or grad_bias is, w defined when grad_x is (else they may be
// undefined: the caller need not keep them alive).
// Ensures: each defined output is overwritten: grad_x = dL/dx, grad_w = dL/dw,
// grad_bias = dL/dbias. An undefined one is not computed (grad_x undefined skips the
// backward-data pass entirely).
void conv2d_backward(const Shape& x_shape, const Shape& w_shape, const Tensor& x, const Tensor& w,
                     const Tensor& grad_out, const ConvParams& p, const Tensor& grad_x, const Tensor& grad_w,
                     const Tensor& grad_bias);

// The kernel table's entry (backend/kernels.h): x kept in its layout, w made plain OIHW,
// the output allocated channels-last unless DPT_CHANNELS_LAST=0, then conv2d_forward.
ConvForward conv2d_forward_run(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p, bool relu,
                               const Shape& out_shape);

}  // namespace dpt::cpu
