// Differentiable batch normalisation for NCHW activations (PyTorch's BatchNorm2d
// semantics), with an optional ReLU fused after it for ResNet blocks.
#pragma once

#include "core/tensor.h"

namespace dpt {

struct BatchNormOptions {
  float momentum = 0.1f;  // running = (1 - momentum) running + momentum batch
  float eps = 1e-5f;
};

// Requires: x [N, C, H, W], weight and bias [C] f32 tensors on one device; running_mean and
// running_var contiguous [C] f32 tensors there (they may be undefined in training, then
// nothing is tracked); in training N H W > 1. On CUDA x may be bf16 and/or channels-last:
// the output and x's gradient then share x's dtype and layout, while the statistics,
// weight and bias (and their gradients) stay f32.
// Ensures: training: out = weight (x - mean) / sqrt(var + eps) + bias with the batch mean
// and biased variance, and the running stats updated in place with momentum and the
// UNBIASED batch variance (not recorded by autograd); eval: the same with the running
// stats, which are left unchanged. With fuse_relu, out = max(0, .). Recorded for
// autograd (gradients for x, weight, bias).
Tensor batch_norm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                    const Tensor& running_var, bool training, const BatchNormOptions& options = {},
                    bool fuse_relu = false);

}  // namespace dpt
