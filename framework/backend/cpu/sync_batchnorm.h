// Synchronised batch norm's passes on the CPU, the twins of backend/cuda/sync_batchnorm.h
// (which states the contract): per-channel sums in double handed over as f32, and the
// elementwise passes between them. Contiguous NCHW f32.
#pragma once

#include "core/tensor.h"

namespace dpt::cpu {

void sync_bn_sum(const Tensor& x, const Tensor& stats);
void sync_bn_sum_sq_dev(const Tensor& x, const Tensor& stats, const Tensor& sq);
void sync_bn_finish_stats(const Tensor& stats, const Tensor& sq, float eps, float momentum,
                          const Tensor& running_mean, const Tensor& running_var, const Tensor& saved);
void sync_bn_normalize(const Tensor& x, const Tensor& saved, const Tensor& weight, const Tensor& bias,
                       const Tensor& xhat, const Tensor& out);
void sync_bn_grad_sums(const Tensor& grad_out, const Tensor& xhat, const Tensor& sums,
                       const Tensor& grad_bias, const Tensor& grad_weight);
void sync_bn_grad_input(const Tensor& grad_out, const Tensor& xhat, const Tensor& weight, const Tensor& saved,
                        const Tensor& stats, const Tensor& sums, const Tensor& grad_x);

}  // namespace dpt::cpu
