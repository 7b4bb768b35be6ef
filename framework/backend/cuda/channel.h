// Per-channel bias on 4-D activations, for the convolutions cuDNN's bias call does not
// cover here (bf16 or channels-last): the add (with an optional ReLU) and the bias
// gradient, a sum over N, H and W. The bias and its gradient stay f32.
#pragma once

#include "core/tensor.h"

namespace dpt::cuda {

// Requires: out [N, C, H, W] f32 or bf16, contiguous or channels-last; bias f32 [C].
// Ensures: out += bias[c], then max(0, .) when relu.
void channel_bias_add(const Tensor& out, const Tensor& bias, bool relu);
// Requires: t like `out` above; sum f32 [C]. Ensures: sum[c] = sum of t[:, c] (in double).
void channel_sum(const Tensor& t, const Tensor& sum);

}  // namespace dpt::cuda
