// Classification losses on [N, C] logits with i64 labels [N], averaged over the batch.
#pragma once

#include "core/tensor.h"

namespace dpt {

Tensor log_softmax(const Tensor& x);  // over dimension 1 of [N, C]
// Mean of -log_probs[n, labels[n]].
Tensor nll_loss(const Tensor& log_probs, const Tensor& labels);
// Fused log-softmax + NLL. With smoothing s the target is (1-s) one-hot + s/C uniform.
// bf16 logits (CUDA) are cast to f32 first: the softmax and the loss are always f32.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing = 0.0f);
// Rows whose largest logit is at the label (no gradient).
int64_t count_correct(const Tensor& logits, const Tensor& labels);

}  // namespace dpt
