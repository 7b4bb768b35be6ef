// Batch normalisation over N, H, W per channel on CUDA, the twin of backend/cpu/batchnorm.h:
// cuDNN's spatial batch norm for training (forward and backward) and inference forward,
// and a plain kernel for the backward of eval mode (cuDNN's backward assumes batch
// statistics), each with an optional ReLU after the normalisation. x, out and gradients
// are f32 or bf16 (one dtype), contiguous NCHW or channels-last NHWC (one layout); the [C]
// tensors contiguous f32; all on one CUDA device. f32 NCHW runs on cuDNN, with the ReLU as
// separate relu_forward / relu_backward passes; bf16 and NHWC on the kernels of
// batchnorm_kernels.cu (same contracts), which fuse the ReLU into their own passes.
#pragma once

#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::cuda {

// Requires: N H W > 1. Ensures: out = weight (x - mean) / sqrt(var + eps) + bias with the
// batch mean and biased variance; save_mean = mean and save_invstd = 1 / sqrt(var + eps)
// for the backward; when running_mean/var are defined they become (1 - momentum) running +
// momentum batch, with the unbiased batch variance (cuDNN's rule, also PyTorch's). With
// relu, out = max(0, .) by relu_forward's rule (a NaN becomes 0).
void batch_norm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 const Tensor& running_mean, const Tensor& running_var, float momentum,
                                 float eps, bool relu, const Tensor& out, const Tensor& save_mean,
                                 const Tensor& save_invstd);
// Ensures: out = weight (x - mean) / sqrt(var + eps) + bias with the given statistics,
// then max(0, .) with relu.
void batch_norm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& mean, const Tensor& var, float eps, bool relu,
                                  const Tensor& out);
// The backwards take relu_out = the forward's out when it fused a ReLU (undefined when it
// did not): grad_out then counts only where relu_out > 0 (relu_backward's mask); grad_out
// itself is left unchanged.
// Requires: what the training forward used and saved. Ensures: grad_x, grad_weight and
// grad_bias overwritten with the gradients.
void batch_norm_backward_training(const Tensor& x, const Tensor& grad_out, const Tensor& relu_out,
                                  const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                  float eps, const Tensor& grad_x, const Tensor& grad_weight,
                                  const Tensor& grad_bias);
// The backward of the inference forward (mean and var constants): grad_x = weight
// invstd grad_out, grad_weight = sum(grad_out xhat), grad_bias = sum(grad_out).
void batch_norm_backward_inference(const Tensor& x, const Tensor& grad_out, const Tensor& relu_out,
                                   const Tensor& weight, const Tensor& mean, const Tensor& var, float eps,
                                   const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias);

// The kernel table's entries (backend/kernels.h): training or inference by saved.params,
// the statistics (and a fused ReLU's output, its mask) kept in `saved`.
Tensor batch_norm_forward_run(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                              const Tensor& running_var, bool keep_for_backward, BatchNormSaved& saved);
void batch_norm_backward_run(const BatchNormSaved& saved, const Tensor& grad_out, const Tensor& grad_x,
                             const Tensor& grad_weight, const Tensor& grad_bias);

}  // namespace dpt::cuda
