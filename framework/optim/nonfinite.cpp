#include "optim/nonfinite.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/device_check.h"

namespace dpt::optim {
namespace {

// One pass over all tensors (on one device, as a model's are) with one flag read back.
bool tensors_finite(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> kept;  // contiguous copies live until the flag is read
  std::vector<FiniteSlot> slots;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    DPT_CHECK(kept.empty() || kept.front().device() == t.device())
        << "non-finite check: tensors on " << kept.front().device().str() << " and " << t.device().str();
    kept.push_back(contiguous_on_device(t));
    slots.push_back({kept.back().data<float>(), kept.back().numel()});
  }
  if (kept.empty()) return true;
  const Device device = kept.front().device();
  Tensor flag = Tensor::zeros({1}, DType::f32, device);
  kernels_for(device).flag_nonfinite(slots, device.index, flag.data<float>());
  return flag.to_vector()[0] == 0.0f;
}

}  // namespace

bool gradients_finite(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(p.grad());
  return tensors_finite(grads);
}

NonfiniteGuard::NonfiniteGuard(const nn::Module& model, const Optimizer& optimizer, bool keep_buffers,
                               bool check_loss)
    : optimizer_(optimizer), buffers_(model.named_buffers()), check_loss_(check_loss) {
  if (keep_buffers)
    for (const auto& [name, t] : buffers_) saved_.emplace_back(name, t.clone());
}

void NonfiniteGuard::before_forward() {
  for (size_t i = 0; i < saved_.size(); ++i) saved_[i].second.copy_from(buffers_[i].second);
}

bool NonfiniteGuard::step_finite(const Tensor& loss) {
  // The loss joins the gradients' check, so a CUDA step reads back one flag.
  std::vector<Tensor> checked = optimizer_.step_gradients();
  if (check_loss_) checked.push_back(loss.detach());
  const bool ok = optimizer_.all_ranks(tensors_finite(checked));
  if (!ok) {
    autograd::NoGrad no_grad;
    for (size_t i = 0; i < saved_.size(); ++i) buffers_[i].second.copy_from(saved_[i].second);
  }
  return ok;
}

}  // namespace dpt::optim
