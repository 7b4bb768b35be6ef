// Row-wise softmax cross-entropy kernels on [N, C] logits, accumulated in double.
#pragma once

#include <cstdint>

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

}  // namespace dpt::cpu
