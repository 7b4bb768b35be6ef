// Differentiable 2-D convolution (PyTorch's conv2d), with the bias and an optional ReLU
// fused into the same kernel: the CPU profile in docs/performance.md spends most of its time here.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dpt {

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;   // zeros on every side
  int64_t dilation = 1;  // 1 = a dense kernel, as in PyTorch
  int64_t groups = 1;    // groups == in_channels == out_channels is depthwise
  // CUDA: run in NHWC (output and gradients channels-last, weights converted to OHWI) even
  // when x's layout cannot tell (C == 1, as for an MNIST image). A channels-last x is run
  // NHWC either way. The CPU chooses its own layout (oneDNN) and ignores this.
  bool channels_last = false;
};

// Requires: x [N, C, H, W] and w [OC, C/groups, KH, KW] f32 tensors on one device (any
// strides), or both bf16 on a CUDA device (the output is then bf16: tensor cores, f32
// accumulation); C and OC divisible by groups; bias f32 [OC] or undefined; stride,
// dilation, groups >= 1, padding >= 0; the (dilated) kernel fits the padded input.
// Ensures: [N, OC, OH, OW] with OH = (H + 2 padding - dilation (KH - 1) - 1) / stride + 1
// (floor), equal to conv(x, w) + bias, then max(0, .) when fuse_relu. Recorded for
// autograd; backward computes only the gradients some input needs (no backward-data pass
// when x needs none, as for the first layer of a network). Bad shapes throw a one-line
// Error naming the op and the shapes. On CUDA the gradients come back in the inputs' own
// layouts.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& options = {},
              bool fuse_relu = false);

}  // namespace dpt
