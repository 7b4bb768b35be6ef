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

int64_t first_bad_label(const Tensor& labels, int64_t classes, int64_t* label) {
  const int64_t* l = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    if (l[i] < 0 || l[i] >= classes) {
      *label = l[i];
      return i;
    }
  return -1;
}

void log_softmax_forward(const Tensor& x, const Tensor& out) {
  log_softmax_forward(x.data<float>(), out.data<float>(), x.size(0), x.size(1));
}

void log_softmax_backward(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in) {
  log_softmax_backward(out.data<float>(), grad_out.data<float>(), grad_in.data<float>(), out.size(0), out.size(1));
}

void nll_forward(const Tensor& log_probs, const Tensor& labels, const Tensor& loss) {
  int64_t rows = log_probs.size(0), cols = log_probs.size(1);
  const float* p = log_probs.data<float>();
  const int64_t* l = labels.data<int64_t>();
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) total -= p[r * cols + l[r]];
  loss.data<float>()[0] = static_cast<float>(total / rows);
}

void nll_backward(const Tensor& labels, const Tensor& grad_loss, const Tensor& grad_in) {
  int64_t rows = grad_in.size(0), cols = grad_in.size(1);
  grad_in.zero_();
  float v = -grad_loss.item() / static_cast<float>(rows);
  const int64_t* lab = labels.data<int64_t>();
  float* gp = grad_in.data<float>();
  for (int64_t r = 0; r < rows; ++r) gp[r * cols + lab[r]] = v;
}

void cross_entropy_forward(const Tensor& logits, const Tensor& labels, float smoothing, const Tensor& log_probs,
                           const Tensor& loss) {
  double mean = cross_entropy_forward(logits.data<float>(), labels.data<int64_t>(), log_probs.data<float>(),
                                      logits.size(0), logits.size(1), smoothing);
  loss.data<float>()[0] = static_cast<float>(mean);
}

void cross_entropy_backward(const Tensor& log_probs, const Tensor& labels, float smoothing,
                            const Tensor& grad_loss, const Tensor& grad) {
  int64_t rows = log_probs.size(0);
  cross_entropy_backward(log_probs.data<float>(), labels.data<int64_t>(), grad.data<float>(), rows,
                         log_probs.size(1), smoothing, grad_loss.item() / static_cast<float>(rows));
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  Tensor in = logits.contiguous();
  int64_t rows = in.size(0), cols = in.size(1), correct = 0;
  const float* p = in.data<float>();
  const int64_t* l = labels.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r)
    correct += (std::max_element(p + r * cols, p + (r + 1) * cols) - (p + r * cols)) == l[r];
  return correct;
}

void eval_totals_add(const Tensor& totals, const Tensor& loss, const Tensor& logits, const Tensor& labels) {
  const int64_t rows = labels.numel();
  float* t = totals.data<float>();
  t[0] += loss.item() * static_cast<float>(rows);
  t[1] += static_cast<float>(count_correct(logits, labels));
  t[2] += static_cast<float>(rows);
}

}  // namespace dpt::cpu
