// Differentiable pooling: max and average over square windows, and global average
// pooling (the head of a ResNet).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dpt {

// Requires: x [N, C, H, W] f32 CPU; kernel >= 1, stride >= 1, 0 <= padding <= kernel / 2;
// the padded input holds at least one window.
// Ensures: [N, C, OH, OW], OH = (H + 2 padding - kernel) / stride + 1 (floor, as PyTorch's
// default ceil_mode=false); max pooling pads with -inf. Recorded for autograd (max
// pooling keeps the argmax from the forward, so its backward does not reread x; on ties
// the gradient goes to one of the maxima).
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding = 0);
// As max_pool2d, averaging instead; the divisor is always kernel * kernel, padding
// included (PyTorch's default count_include_pad=true).
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding = 0);

// Requires: x [N, C, H, W] f32 CPU with H, W >= 1. Ensures: [N, C], the mean over H and W;
// recorded for autograd.
Tensor global_avg_pool2d(const Tensor& x);

}  // namespace dpt
