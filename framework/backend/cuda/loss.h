// Row-wise softmax losses on CUDA, the twins of backend/cpu/loss.h and of the loops in
// ops/loss.cpp: [rows, cols] f32 logits (contiguous), i64 labels [rows], one warp per row,
// sums in double. Losses land in a one-element device tensor (no wait for the GPU);
// backward kernels read the upstream gradient from one too.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dpt::cuda {

// Waits for the GPU. Returns the first row whose label is outside [0, classes), or -1;
// *label gets that label.
int64_t first_bad_label(const Tensor& labels, int64_t classes, int64_t* label);

// out[r, c] = x[r, c] - log(sum_c exp(x[r, c])).
void log_softmax_forward(const Tensor& x, const Tensor& out);
// grad_in = grad_out - exp(out) * rowsum(grad_out); grad_in may be grad_out.
void log_softmax_backward(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in);

// loss = mean over rows of -log_probs[r, labels[r]].
void nll_forward(const Tensor& log_probs, const Tensor& labels, const Tensor& loss);
// grad_in[r, c] = (c == labels[r]) ? -grad_loss / rows : 0, every element written.
void nll_backward(const Tensor& labels, const Tensor& grad_loss, const Tensor& grad_in);

// log_probs = log_softmax(logits); loss = mean over rows of
// -(1-s) log_probs[r, label] - (s/C) sum_c log_probs[r, c].
void cross_entropy_forward(const Tensor& logits, const Tensor& labels, float smoothing,
                           const Tensor& log_probs, const Tensor& loss);
// grad = (grad_loss / rows) * (exp(log_probs) - ((1-s) onehot(label) + s/C)).
void cross_entropy_backward(const Tensor& log_probs, const Tensor& labels, float smoothing,
                            const Tensor& grad_loss, const Tensor& grad);

// Waits for the GPU. Rows whose largest logit (the first, on ties) is at the label.
int64_t count_correct(const Tensor& logits, const Tensor& labels);

}  // namespace dpt::cuda
