// Evaluation totals kept on the device: the loss summed over samples, the correct
// predictions and the samples seen, so an evaluation pass reads nothing back until its
// end (and all-reduces the three numbers on the device first).
#pragma once

#include "core/tensor.h"

namespace dpt::cuda {

// Requires: totals contiguous f32 [3]; loss f32 [1] (a batch mean); logits f32 or bf16
// [rows, C] (any strides); labels contiguous i64 [rows] in [0, C); all on one CUDA device; the rows of
// every call so far below 2^24 (counts stay exact in f32).
// Ensures: totals += (loss rows, rows whose largest logit — the first on ties — is at the
// label, rows). Nothing waits for the GPU.
void eval_totals_add(const Tensor& totals, const Tensor& loss, const Tensor& logits, const Tensor& labels);

}  // namespace dpt::cuda
