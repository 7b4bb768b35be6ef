// 2-D max and average pooling on CPU with oneDNN, forward and backward, on NCHW or
// channels-last tensors (outputs and gradients in the input's layout); plus global
// average pooling as a plain loop.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::cpu {

// Bytes of the workspace a training forward leaves for pool2d_backward (max pooling's
// argmax; 0 for average pooling).
size_t pool2d_workspace_bytes(PoolKind kind, const Shape& x_shape, const Shape& out_shape,
                              const PoolParams& p, bool channels_last = false);

// Requires: x [N, C, H, W] f32, contiguous or channels-last; out [N, C, OH, OW] in x's layout with
// OH = (H + 2 padding - kernel) / stride + 1; workspace undefined (inference, or a kind
// that needs none) or a buffer of at least pool2d_workspace_bytes (any dtype, opaque).
// Ensures: out written entirely; a defined workspace filled for pool2d_backward.
void pool2d_forward(PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out,
                    const Tensor& workspace);

// Requires: grad_out [N, C, OH, OW] and grad_x [N, C, H, W] (x_shape), both in the
// forward's layout; for max, the workspace its forward filled.
// Ensures: grad_x overwritten with dL/dx.
void pool2d_backward(PoolKind kind, const Shape& x_shape, const Tensor& grad_out, const PoolParams& p,
                     const Tensor& workspace, const Tensor& grad_x);

// Requires: x [N, C, H, W] contiguous or channels-last, out [N, C] contiguous.
// Ensures: out = mean over H, W.
void global_avg_pool2d_forward(const Tensor& x, const Tensor& out);
// Requires: grad_out [N, C] contiguous, grad_x [N, C, H, W] contiguous or channels-last.
// Ensures: grad_x = g / (H W).
void global_avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x);

// The kernel table's entries (backend/kernels.h): the workspace kept in `saved` when a
// backward follows, then the kernels above.
void pool2d_forward_run(PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out,
                        bool keep_for_backward, PoolSaved& saved);
void pool2d_backward_run(PoolKind kind, const PoolSaved& saved, const Tensor& grad_out, const PoolParams& p,
                         const Tensor& grad_x);

}  // namespace dpt::cpu
