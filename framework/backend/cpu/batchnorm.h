// Batch normalisation over N, H, W per channel on CPU with oneDNN, forward and backward,
// optionally with a ReLU fused after it (oneDNN's fuse_norm_relu).
#pragma once

#include <cstddef>

#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::cpu {

struct BatchNormKernelParams {
  float eps = 1e-5f;
  bool use_global_stats = false;  // normalise with given mean/var (eval) instead of batch stats
  bool relu = false;              // out = max(0, bn(x))
};

// Bytes of the workspace a forward must leave for batch_norm_backward (the ReLU mask;
// 0 without relu), for an NCHW or a channels-last x.
size_t batch_norm_workspace_bytes(const Shape& x_shape, const BatchNormKernelParams& p, bool channels_last = false);

// Requires: f32: x [N, C, H, W] contiguous or channels-last, out in x's layout; weight,
// bias, mean, var contiguous [C];
// workspace undefined (no backward will follow) or of batch_norm_workspace_bytes.
// Ensures: out = weight (x - mean) / sqrt(var + eps) + bias (then ReLU). Without
// use_global_stats, mean and var are outputs: the batch mean and biased variance; with
// it, they are inputs.
void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                        const Tensor& var, const BatchNormKernelParams& p, const Tensor& out,
                        const Tensor& workspace);

// Requires: the tensors the forward used (mean, var as it left them; its workspace when
// relu), grad_out in x's layout; outputs: grad_x in x's layout, grad_weight, grad_bias
// contiguous [C].
// Ensures: all three overwritten with the gradients.
void batch_norm_backward(const Tensor& x, const Tensor& grad_out, const Tensor& weight, const Tensor& bias,
                         const Tensor& mean, const Tensor& var, const BatchNormKernelParams& p,
                         const Tensor& workspace, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias);

// Requires: running_mean, running_var, mean, var contiguous [C]; count = N H W > 1.
// Ensures: running = (1 - momentum) running + momentum batch, with the variance made
// unbiased (var count / (count - 1)) first, as PyTorch does.
void batch_norm_update_running(const Tensor& running_mean, const Tensor& running_var, const Tensor& mean,
                               const Tensor& var, float momentum, int64_t count);

// The kernel table's entries (backend/kernels.h): the statistics in `saved` (and the ReLU
// mask in its workspace when a backward follows), the running update, then the kernels above.
Tensor batch_norm_forward_run(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                              const Tensor& running_var, bool keep_for_backward, BatchNormSaved& saved);
void batch_norm_backward_run(const BatchNormSaved& saved, const Tensor& grad_out, const Tensor& grad_x,
                             const Tensor& grad_weight, const Tensor& grad_bias);

}  // namespace dpt::cpu
