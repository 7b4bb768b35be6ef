// The parameter-free shortcut of He et al. 2016 (option A): where a residual stage halves
// the map and widens the channels, the shortcut subsamples the input and pads the new
// channels with zeros, so it adds no parameters.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dpt {

// Requires: x [N, C, H, W] f32 CPU (any strides); out_channels >= C; stride >= 1.
// Ensures: [N, out_channels, ceil(H / stride), ceil(W / stride)] where channel c < C is
// x[:, c, ::stride, ::stride] and channels C.. are zero (the zeros come after, as in
// fb.resnet.torch's shortcutType 'A'). The map size equals that of a 3x3 conv with
// padding 1 and the same stride. Recorded for autograd: the gradient scatters back to the
// sampled positions; every other position of x gets 0.
Tensor shortcut_pad(const Tensor& x, int64_t out_channels, int64_t stride);

}  // namespace dpt
