#include "ops/loss.h"

#include <algorithm>

#include "autograd/node.h"
#include "backend/cpu/loss.h"
#include "ops/device_check.h"

namespace dpt {
namespace {

void check_logits_labels(const char* op, const Tensor& logits, const Tensor& labels) {
  check_cpu_f32(op, {&logits});
  DPT_CHECK(logits.dim() == 2) << op << ": expected logits [N, C], got " << shape_str(logits.shape());
  DPT_CHECK(labels.dtype() == DType::i64 && labels.dim() == 1 && labels.size(0) == logits.size(0))
      << op << ": expected i64 labels [" << logits.size(0) << "], got " << dtype_name(labels.dtype()) << " "
      << shape_str(labels.shape());
  DPT_CHECK(logits.size(0) > 0) << op << ": empty batch";
  const int64_t* l = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    DPT_CHECK(l[i] >= 0 && l[i] < logits.size(1))
        << op << ": label " << l[i] << " at row " << i << " is outside [0, " << logits.size(1) << ")";
}

}  // namespace

Tensor log_softmax(const Tensor& x) {
  check_cpu_f32("log_softmax", {&x});
  DPT_CHECK(x.dim() == 2) << "log_softmax: expected [N, C], got " << shape_str(x.shape());
  Tensor in = x.contiguous();
  Tensor out = Tensor::empty(x.shape());
  int64_t rows = x.size(0), cols = x.size(1);
  cpu::log_softmax_forward(in.data<float>(), out.data<float>(), rows, cols);
  autograd::record("log_softmax", out, {x}, [out = out.detach(), rows, cols](const Tensor& g) {
    Tensor gc = g.contiguous();
    Tensor gi = Tensor::empty(out.shape());
    cpu::log_softmax_backward(out.data<float>(), gc.data<float>(), gi.data<float>(), rows, cols);
    return std::vector<Tensor>{gi};
  });
  return out;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& labels) {
  check_logits_labels("nll_loss", log_probs, labels);
  Tensor lp = log_probs.contiguous();
  int64_t rows = lp.size(0), cols = lp.size(1);
  const float* p = lp.data<float>();
  const int64_t* l = labels.data<int64_t>();
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) total -= p[r * cols + l[r]];
  Tensor out = Tensor::full({}, static_cast<float>(total / rows));
  autograd::record("nll_loss", out, {log_probs}, [labels, rows, cols](const Tensor& g) {
    Tensor gi = Tensor::zeros({rows, cols});
    float v = -g.item() / static_cast<float>(rows);
    const int64_t* lab = labels.data<int64_t>();
    float* gp = gi.data<float>();
    for (int64_t r = 0; r < rows; ++r) gp[r * cols + lab[r]] = v;
    return std::vector<Tensor>{gi};
  });
  return out;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing) {
  check_logits_labels("cross_entropy", logits, labels);
  DPT_CHECK(label_smoothing >= 0.0f && label_smoothing < 1.0f)
      << "cross_entropy: label_smoothing must be in [0, 1), got " << label_smoothing;
  Tensor in = logits.contiguous();
  int64_t rows = in.size(0), cols = in.size(1);
  Tensor log_probs = Tensor::empty(in.shape());
  double loss = cpu::cross_entropy_forward(in.data<float>(), labels.data<int64_t>(), log_probs.data<float>(), rows,
                                           cols, label_smoothing);
  Tensor out = Tensor::full({}, static_cast<float>(loss));
  autograd::record("cross_entropy", out, {logits}, [log_probs, labels, rows, cols, label_smoothing](const Tensor& g) {
    Tensor gi = Tensor::empty({rows, cols});
    cpu::cross_entropy_backward(log_probs.data<float>(), labels.data<int64_t>(), gi.data<float>(), rows, cols,
                                label_smoothing, g.item() / static_cast<float>(rows));
    return std::vector<Tensor>{gi};
  });
  return out;
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  check_logits_labels("count_correct", logits, labels);
  Tensor in = logits.contiguous();
  int64_t rows = in.size(0), cols = in.size(1), correct = 0;
  const float* p = in.data<float>();
  const int64_t* l = labels.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r)
    correct += (std::max_element(p + r * cols, p + (r + 1) * cols) - (p + r * cols)) == l[r];
  return correct;
}

}  // namespace dpt
