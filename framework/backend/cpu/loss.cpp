#include "backend/cpu/loss.h"

#include <algorithm>
#include <cmath>

namespace dpt::cpu {

void log_softmax_forward(const float* x, float* out, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float max = *std::max_element(xr, xr + cols);
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(static_cast<double>(xr[c] - max));
    float log_z = max + static_cast<float>(std::log(s));
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = xr[c] - log_z;
  }
}

void log_softmax_backward(const float* out, const float* grad_out, float* grad_in, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = grad_out + r * cols;
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += g[c];
    for (int64_t c = 0; c < cols; ++c)
      grad_in[r * cols + c] = g[c] - std::exp(out[r * cols + c]) * static_cast<float>(s);
  }
}

double cross_entropy_forward(const float* logits, const int64_t* labels, float* log_probs, int64_t rows,
                             int64_t cols, float smoothing) {
  log_softmax_forward(logits, log_probs, rows, cols);
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* lp = log_probs + r * cols;
    double row_sum = 0;
    if (smoothing > 0)
      for (int64_t c = 0; c < cols; ++c) row_sum += lp[c];
    total += -(1.0 - smoothing) * lp[labels[r]] - smoothing / static_cast<double>(cols) * row_sum;
  }
  return total / static_cast<double>(rows);
}

void cross_entropy_backward(const float* log_probs, const int64_t* labels, float* grad, int64_t rows,
                            int64_t cols, float smoothing, float scale) {
  float uniform = smoothing / static_cast<float>(cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float target = uniform + (c == labels[r] ? 1.0f - smoothing : 0.0f);
      grad[r * cols + c] = scale * (std::exp(log_probs[r * cols + c]) - target);
    }
}

}  // namespace dpt::cpu
