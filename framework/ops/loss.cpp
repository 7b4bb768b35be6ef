// Losses: checks at the door, then the logits' device's kernels. The loss stays on the
// device, so on CUDA a step waits only for the label check's verdict.
#include "ops/loss.h"

#include <algorithm>

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/cast.h"
#include "ops/device_check.h"

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
  // A capture forbids the read-back: there the host checked the labels before uploading
  // them (optim/graphed_train_step.cpp).
  const Kernels& k = kernels_for(device);
  if (k.capturing(device.index)) return device;
  int64_t label = 0;
  int64_t row = k.first_bad_label(labels, logits.size(1), &label);
  DPT_CHECK(row < 0) << op << ": label " << label << " at row " << row << " is outside [0, " << logits.size(1)
                     << ")";
  return device;
}

// bf16 logits (a mixed-precision network's last layer) are cast to f32 first, recorded, so
// the softmax and the loss are f32 and the gradient flows back as bf16.
Tensor f32_logits(const Tensor& logits) {
  return logits.defined() && logits.dtype() == DType::bf16 ? cast(logits, DType::f32) : logits;
}

}  // namespace

Tensor log_softmax(const Tensor& x) {
  Device device = op_device("log_softmax", {&x});
  DPT_CHECK(x.dim() == 2) << "log_softmax: expected [N, C], got " << shape_str(x.shape());
  Tensor in = contiguous_on_device(x);
  Tensor out = Tensor::empty(x.shape(), DType::f32, device);
  kernels_for(device).log_softmax_forward(in, out);
  autograd::record("log_softmax", out, {x}, [out = out.detach()](const Tensor& g) {
    Tensor gc = contiguous_on_device(g);
    Tensor gi = Tensor::empty(out.shape(), DType::f32, out.device());
    kernels_for(out.device()).log_softmax_backward(out, gc, gi);
    return std::vector<Tensor>{gi};
  });
  return out;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& labels_in) {
  Tensor labels = contiguous_on_device(labels_in);
  Device device = check_logits_labels("nll_loss", log_probs, labels);
  Tensor lp = contiguous_on_device(log_probs);
  Tensor out = Tensor::empty({}, DType::f32, device);  // the one-element loss
  kernels_for(device).nll_forward(lp, labels, out);
  autograd::record("nll_loss", out, {log_probs}, [labels, shape = lp.shape()](const Tensor& g) {
    Tensor gi = Tensor::empty(shape, DType::f32, labels.device());
    kernels_for(labels.device()).nll_backward(labels, g, gi);
    return std::vector<Tensor>{gi};
  });
  return out;
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& labels_in, float label_smoothing) {
  Tensor logits = f32_logits(logits_in);
  Tensor labels = contiguous_on_device(labels_in);
  Device device = check_logits_labels("cross_entropy", logits, labels);
  DPT_CHECK(label_smoothing >= 0.0f && label_smoothing < 1.0f)
      << "cross_entropy: label_smoothing must be in [0, 1), got " << label_smoothing;
  Tensor in = contiguous_on_device(logits);
  int64_t rows = in.size(0), cols = in.size(1);
  Tensor log_probs = Tensor::empty(in.shape(), DType::f32, device);
  Tensor out = Tensor::empty({}, DType::f32, device);  // the one-element loss
  kernels_for(device).cross_entropy_forward(in, labels, label_smoothing, log_probs, out);
  autograd::record("cross_entropy", out, {logits},
                   [log_probs, labels, rows, cols, label_smoothing, device](const Tensor& g) {
                     Tensor gi = Tensor::empty({rows, cols}, DType::f32, device);
                     kernels_for(device).cross_entropy_backward(log_probs, labels, label_smoothing, g, gi);
                     return std::vector<Tensor>{gi};
                   });
  return out;
}

int64_t count_correct(const Tensor& logits_in, const Tensor& labels_in) {
  Tensor logits = f32_logits(logits_in);
  Tensor labels = contiguous_on_device(labels_in);
  Device device = check_logits_labels("count_correct", logits, labels);
  return kernels_for(device).count_correct(contiguous_on_device(logits), labels);
}

}  // namespace dpt
