// 2-D max and average pooling on CUDA with cuDNN, the twin of backend/cpu/pool.h, and
// global average pooling as a plain kernel. f32 or bf16, contiguous NCHW or channels-last
// NHWC; the tensors of one call share the input's dtype and layout (global pooling's [N, C]
// output and gradient are contiguous). f32 NCHW pooling runs on cuDNN, the rest on own kernels.
#pragma once

#include <cstdint>

#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::cuda {

// Requires: x [N, C, H, W], out [N, C, OH, OW], OH = (H + 2 padding - kernel) / stride + 1.
// Ensures: out written entirely.
void pool2d_forward(PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out);
// Requires: the forward's x and out (cuDNN's backward reads both: max pooling finds its
// argmax again from them), grad_out like out, grad_x like x. Ensures: grad_x = dL/dx; on
// ties the gradient goes to one of the maxima.
void pool2d_backward(PoolKind kind, const Tensor& x, const Tensor& out, const Tensor& grad_out,
                     const PoolParams& p, const Tensor& grad_x);

// Requires: x [N, C, H, W] with H W >= 1, out [N, C]. Ensures: out = mean over H, W (sum in double).
void global_avg_pool2d_forward(const Tensor& x, const Tensor& out);
// Requires: grad_out [N, C], grad_x [N, C, H, W]. Ensures: grad_x = grad_out / (H W).
void global_avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x);

// The kernel table's entries (backend/kernels.h): the input and output kept in `saved`.
void pool2d_forward_run(PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out,
                        bool keep_for_backward, PoolSaved& saved);
void pool2d_backward_run(PoolKind kind, const PoolSaved& saved, const Tensor& grad_out, const PoolParams& p,
                         const Tensor& grad_x);

}  // namespace dpt::cuda
