// Row-wise softmax cross-entropy kernels on [N, C] logits, accumulated in double.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace dpt::cpu {

// out[n, c] = x[n, c] - log(sum_c exp(x[n, c])).
void log_softmax_forward(const float* x, float* out, int64_t rows, int64_t cols);
// grad_in = grad_out - softmax * rowsum(grad_out), softmax = exp(out).
void log_softmax_backward(const float* out, const float* grad_out, float* grad_in, int64_t rows, int64_t cols);

// Mean over rows of -(1-s) log p[label] - (s/C) sum_c log p[c]; writes log p to `log_probs`.
double cross_entropy_forward(const float* logits, const int64_t* labels, float* log_probs, int64_t rows,
                             int64_t cols, float smoothing);
// grad = scale * (softmax - ((1-s) onehot(label) + s/C)).
void cross_entropy_backward(const float* log_probs, const int64_t* labels, float* grad, int64_t rows,
                            int64_t cols, float smoothing, float scale);

// The tensor-level entries of the kernel table (backend/kernels.h has their contracts):
// contiguous f32 [rows, cols], labels contiguous i64 [rows], losses one f32 element.
int64_t first_bad_label(const Tensor& labels, int64_t classes, int64_t* label);
void log_softmax_forward(const Tensor& x, const Tensor& out);
void log_softmax_backward(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in);
void nll_forward(const Tensor& log_probs, const Tensor& labels, const Tensor& loss);
void nll_backward(const Tensor& labels, const Tensor& grad_loss, const Tensor& grad_in);
void cross_entropy_forward(const Tensor& logits, const Tensor& labels, float smoothing, const Tensor& log_probs,
                           const Tensor& loss);
void cross_entropy_backward(const Tensor& log_probs, const Tensor& labels, float smoothing,
                            const Tensor& grad_loss, const Tensor& grad);
int64_t count_correct(const Tensor& logits, const Tensor& labels);
void eval_totals_add(const Tensor& totals, const Tensor& loss, const Tensor& logits, const Tensor& labels);

}  // namespace dpt::cpu
