// Row-wise softmax losses on [rows, cols] logits, accumulated in double.
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.h"

namespace dpt::cpu {

void log_softmax_forward(const Tensor& x, const Tensor& out) {
  int64_t rows = x.size(0), cols = x.size(1);
  const float* px = x.data<float>();
  float* po = out.data<float>();
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * cols;
    float max = *std::max_element(xr, xr + cols);
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(static_cast<double>(xr[c] - max));
    float log_z = max + static_cast<float>(std::log(s));
    for (int64_t c = 0; c < cols; ++c) po[r * cols + c] = xr[c] - log_z;
  }
}

void log_softmax_backward(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in) {
  int64_t rows = out.size(0), cols = out.size(1);
  const float* po = out.data<float>();
  const float* pg = grad_out.data<float>();
  float* pi = grad_in.data<float>();
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = pg + r * cols;
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += g[c];
    for (int64_t c = 0; c < cols; ++c)
      pi[r * cols + c] = g[c] - std::exp(po[r * cols + c]) * static_cast<float>(s);
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

void cross_entropy_forward(const Tensor& logits, const Tensor& labels, float smoothing,
                           const Tensor& log_probs, const Tensor& loss) {
  log_softmax_forward(logits, log_probs);
  int64_t rows = logits.size(0), cols = logits.size(1);
  const int64_t* l = labels.data<int64_t>();
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* lp = log_probs.data<float>() + r * cols;
    double row_sum = 0;
    if (smoothing > 0)
      for (int64_t c = 0; c < cols; ++c) row_sum += lp[c];
    total += -(1.0 - smoothing) * lp[l[r]] - smoothing / static_cast<double>(cols) * row_sum;
  }
  loss.data<float>()[0] = static_cast<float>(total / static_cast<double>(rows));
}

void cross_entropy_backward(const Tensor& log_probs, const Tensor& labels, float smoothing,
                            const Tensor& grad_loss, const Tensor& grad) {
  int64_t rows = log_probs.size(0), cols = log_probs.size(1);
  float scale = grad_loss.item() / static_cast<float>(rows), uniform = smoothing / static_cast<float>(cols);
  const float* lp = log_probs.data<float>();
  const int64_t* l = labels.data<int64_t>();
  float* g = grad.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float target = uniform + (c == l[r] ? 1.0f - smoothing : 0.0f);
      g[r * cols + c] = scale * (std::exp(lp[r * cols + c]) - target);
    }
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
