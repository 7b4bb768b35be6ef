// 2-D convolution on CUDA with cuDNN, the twin of backend/cpu/conv.h: forward with bias and
// ReLU, backward data, backward filter and bias. Contiguous NCHW activations with OIHW
// weights, or (ConvParams::nhwc) channels-last NHWC activations with OHWI weights
// (channels-last [O, I, H, W]); f32, or bf16 on tensor cores with f32 accumulation.
// Algorithms are chosen once per shape, dtype and layout (cuDNN's heuristics) and cached.
#pragma once

#include <cstdint>

#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::cuda {

// Requires: on one CUDA device, x [N, C, H, W], w [OC, C/groups, KH, KW] and out [N, OC, OH, OW]
// (OH = (H + 2p - d(KH-1) - 1)/s + 1) of one dtype (f32 or bf16) in p.nhwc's layout;
// bias f32 [OC] or undefined.
// Ensures: out = conv(x, w) + bias, then max(0, .) when relu; every element written.
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p, bool relu,
                    const Tensor& out);

// Requires: as conv2d_forward, the gradients in the same dtype and layout (grad_bias f32);
// grad_out [N, OC, OH, OW] already masked by a fused ReLU;
// x defined when grad_w or grad_bias is, w when grad_x is. Ensures: each defined output
// overwritten with its gradient; an undefined one is not computed.
void conv2d_backward(const Shape& x_shape, const Shape& w_shape, const Tensor& x, const Tensor& w,
                     const Tensor& grad_out, const ConvParams& p, const Tensor& grad_x, const Tensor& grad_w,
                     const Tensor& grad_bias);

// The kernel table's entry (backend/kernels.h): NHWC when p.nhwc asks for it or the input
// already is, x and w brought to that layout, then conv2d_forward.
ConvForward conv2d_forward_run(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p, bool relu,
                               const Shape& out_shape);

}  // namespace dpt::cuda
