// Batch normalisation kernels for what the cuDNN path in batchnorm.cu does not take: bf16
// activations and channels-last (NHWC) tensors, in any mix; the channel tensors (weight,
// bias, statistics, their gradients) stay f32. Same contracts as batchnorm.h, the fused
// ReLU included (done inside these kernels' own passes); called from there, not from ops.
#pragma once

#include "core/tensor.h"

namespace dpt::cuda::bn_kernels {

void forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, float momentum, float eps, bool relu, const Tensor& out,
                      const Tensor& save_mean, const Tensor& save_invstd);
void forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                       const Tensor& var, float eps, bool relu, const Tensor& out);
void backward_training(const Tensor& x, const Tensor& grad_out, const Tensor& relu_out, const Tensor& weight,
                       const Tensor& save_mean, const Tensor& save_invstd, const Tensor& grad_x,
                       const Tensor& grad_weight, const Tensor& grad_bias);
void backward_inference(const Tensor& x, const Tensor& grad_out, const Tensor& relu_out, const Tensor& weight,
                        const Tensor& mean, const Tensor& var, float eps, const Tensor& grad_x,
                        const Tensor& grad_weight, const Tensor& grad_bias);

}  // namespace dpt::cuda::bn_kernels
