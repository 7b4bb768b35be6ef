// Losses: checks at the door, then the kernels of the logits' device. On CUDA the loss is
// a one-element device tensor and the backward reads its gradient there, so a training
// step waits for the GPU only where the label check reads back its verdict.
#include "ops/loss.h"

#include <algorithm>

#include "autograd/node.h"
#include "backend/cpu/loss.h"
#include "ops/cast.h"
#include "ops/device_check.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/graph.h"
#include "backend/cuda/loss.h"
#endif

namespace dpt {
namespace {

// `labels` must already be contiguous (contiguous_on_device): the check reads them as the
// kernels will, element r for row r.
Device check_logits_labels(const char* op, const Tensor& logits, const Tensor& labels) {
  Device device = op_device(op, {&logits});
  DPT_CHECK(logits.dim() == 2) << op << ": expected logits [N, C], got " << shape_str(logits.shape());
  DPT_CHECK(labels.dtype() == DType::i64 && labels.dim() == 1 && labels.size(0) == logits.size(0))
      << op << ": expected i64 labels [" << logits.size(0) << "], got " << dtype_name(labels.dtype()) << " "
      << shape_str(labels.shape());
  DPT_CHECK(labels.device() == device)
      << op << ": labels are on " << labels.device().str() << " but logits on " << device.str();
  DPT_CHECK(logits.size(0) > 0) << op << ": empty batch";
#ifdef DPT_WITH_CUDA
  // Inside a CUDA graph capture the check would read back from the device, which a
  // capture forbids: there the labels come from a static buffer whose every batch the
  // host checked before uploading it (optim/graphed_train_step.cpp).
  if (device.is_cuda() && cuda::capture_active(device.index)) return device;
  if (device.is_cuda()) {
    int64_t label = 0;
    int64_t row = cuda::first_bad_label(labels, logits.size(1), &label);
    DPT_CHECK(row < 0) << op << ": label " << label << " at row " << row << " is outside [0, "
                       << logits.size(1) << ")";
    return device;
  }
#endif
  const int64_t* l = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    DPT_CHECK(l[i] >= 0 && l[i] < logits.size(1))
        << op << ": label " << l[i] << " at row " << i << " is outside [0, " << logits.size(1) << ")";
  return device;
}

// The dispatch points: backend/cuda for CUDA tensors, backend/cpu (or plain loops here)
// otherwise. Every tensor is contiguous; [rows, cols] = in's shape.

void log_softmax_forward_on(const Tensor& in, const Tensor& out) {
#ifdef DPT_WITH_CUDA
  if (in.device().is_cuda()) return cuda::log_softmax_forward(in, out);
#endif
  cpu::log_softmax_forward(in.data<float>(), out.data<float>(), in.size(0), in.size(1));
}

void log_softmax_backward_on(const Tensor& out, const Tensor& g, const Tensor& gi) {
#ifdef DPT_WITH_CUDA
  if (out.device().is_cuda()) return cuda::log_softmax_backward(out, g, gi);
#endif
  cpu::log_softmax_backward(out.data<float>(), g.data<float>(), gi.data<float>(), out.size(0), out.size(1));
}

Tensor nll_forward_on(const Tensor& lp, const Tensor& labels) {
#ifdef DPT_WITH_CUDA
  if (lp.device().is_cuda()) {
    Tensor out = Tensor::empty({}, DType::f32, lp.device());
    cuda::nll_forward(lp, labels, out);
    return out;
  }
#endif
  int64_t rows = lp.size(0), cols = lp.size(1);
  const float* p = lp.data<float>();
  const int64_t* l = labels.data<int64_t>();
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) total -= p[r * cols + l[r]];
  return Tensor::full({}, static_cast<float>(total / rows));
}

Tensor nll_backward_on(const Tensor& labels, const Tensor& g, int64_t rows, int64_t cols) {
#ifdef DPT_WITH_CUDA
  if (labels.device().is_cuda()) {
    Tensor gi = Tensor::empty({rows, cols}, DType::f32, labels.device());
    cuda::nll_backward(labels, g, gi);
    return gi;
  }
#endif
  Tensor gi = Tensor::zeros({rows, cols});
  float v = -g.item() / static_cast<float>(rows);
  const int64_t* lab = labels.data<int64_t>();
  float* gp = gi.data<float>();
  for (int64_t r = 0; r < rows; ++r) gp[r * cols + lab[r]] = v;
  return gi;
}

Tensor cross_entropy_forward_on(const Tensor& in, const Tensor& labels, float smoothing,
                                const Tensor& log_probs) {
#ifdef DPT_WITH_CUDA
  if (in.device().is_cuda()) {
    Tensor out = Tensor::empty({}, DType::f32, in.device());
    cuda::cross_entropy_forward(in, labels, smoothing, log_probs, out);
    return out;
  }
#endif
  double loss = cpu::cross_entropy_forward(in.data<float>(), labels.data<int64_t>(), log_probs.data<float>(),
                                           in.size(0), in.size(1), smoothing);
  return Tensor::full({}, static_cast<float>(loss));
}

void cross_entropy_backward_on(const Tensor& log_probs, const Tensor& labels, float smoothing,
                               const Tensor& g, const Tensor& gi) {
#ifdef DPT_WITH_CUDA
  if (log_probs.device().is_cuda()) return cuda::cross_entropy_backward(log_probs, labels, smoothing, g, gi);
#endif
  int64_t rows = log_probs.size(0);
  cpu::cross_entropy_backward(log_probs.data<float>(), labels.data<int64_t>(), gi.data<float>(), rows,
                              log_probs.size(1), smoothing, g.item() / static_cast<float>(rows));
}

int64_t count_correct_on(const Tensor& in, const Tensor& labels) {
#ifdef DPT_WITH_CUDA
  if (in.device().is_cuda()) return cuda::count_correct(in, labels);
#endif
  int64_t rows = in.size(0), cols = in.size(1), correct = 0;
  const float* p = in.data<float>();
  const int64_t* l = labels.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r)
    correct += (std::max_element(p + r * cols, p + (r + 1) * cols) - (p + r * cols)) == l[r];
  return correct;
}

}  // namespace

Tensor log_softmax(const Tensor& x) {
  Device device = op_device("log_softmax", {&x});
  DPT_CHECK(x.dim() == 2) << "log_softmax: expected [N, C], got " << shape_str(x.shape());
  Tensor in = contiguous_on_device(x);
  Tensor out = Tensor::empty(x.shape(), DType::f32, device);
  log_softmax_forward_on(in, out);
  autograd::record("log_softmax", out, {x}, [out = out.detach()](const Tensor& g) {
    check_grad("log_softmax backward", g, out.device());
    Tensor gc = contiguous_on_device(g);
    Tensor gi = Tensor::empty(out.shape(), DType::f32, out.device());
    log_softmax_backward_on(out, gc, gi);
    return std::vector<Tensor>{gi};
  });
  return out;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& labels_in) {
  Tensor labels = contiguous_on_device(labels_in);
  check_logits_labels("nll_loss", log_probs, labels);
  Tensor lp = contiguous_on_device(log_probs);
  int64_t rows = lp.size(0), cols = lp.size(1);
  Tensor out = nll_forward_on(lp, labels);
  autograd::record("nll_loss", out, {log_probs}, [labels, rows, cols](const Tensor& g) {
    check_grad("nll_loss backward", g, labels.device());
    return std::vector<Tensor>{nll_backward_on(labels, g, rows, cols)};
  });
  return out;
}

namespace {

// bf16 logits (a mixed-precision network's last layer) are cast to f32 first, recorded, so
// the softmax and the loss are f32 and the gradient flows back as bf16.
Tensor f32_logits(const Tensor& logits) {
  return logits.defined() && logits.dtype() == DType::bf16 ? cast(logits, DType::f32) : logits;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& labels_in, float label_smoothing) {
  Tensor logits = f32_logits(logits_in);
  Tensor labels = contiguous_on_device(labels_in);
  Device device = check_logits_labels("cross_entropy", logits, labels);
  DPT_CHECK(label_smoothing >= 0.0f && label_smoothing < 1.0f)
      << "cross_entropy: label_smoothing must be in [0, 1), got " << label_smoothing;
  Tensor in = contiguous_on_device(logits);
  int64_t rows = in.size(0), cols = in.size(1);
  Tensor log_probs = Tensor::empty(in.shape(), DType::f32, device);
  Tensor out = cross_entropy_forward_on(in, labels, label_smoothing, log_probs);
  autograd::record("cross_entropy", out, {logits},
                   [log_probs, labels, rows, cols, label_smoothing, device](const Tensor& g) {
                     check_grad("cross_entropy backward", g, device);
                     Tensor gi = Tensor::empty({rows, cols}, DType::f32, device);
                     cross_entropy_backward_on(log_probs, labels, label_smoothing, g, gi);
                     return std::vector<Tensor>{gi};
                   });
  return out;
}

int64_t count_correct(const Tensor& logits_in, const Tensor& labels_in) {
  Tensor logits = f32_logits(logits_in);
  Tensor labels = contiguous_on_device(labels_in);
  check_logits_labels("count_correct", logits, labels);
  return count_correct_on(contiguous_on_device(logits), labels);
}

}  // namespace dpt
