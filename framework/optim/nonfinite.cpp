#include "optim/nonfinite.h"

#include <cmath>
#include <cstring>

#include "autograd/node.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/elementwise.h"
#include "backend/cuda/nonfinite.h"
#endif

namespace dpt::optim {
namespace {

// Exponent bits all ones is Inf or NaN. A branch-free OR over the bits vectorises, and
// gradients are finite on almost every step, so there is nothing to stop early for.
bool finite_f32(const float* p, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, 4);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// CPU tensors are read where they are; CUDA ones (all on one device, as a model's are) are
// checked there in one pass with one flag read back (backend/cuda/nonfinite.h).
bool tensors_finite(const std::vector<Tensor>& tensors) {
#ifdef DPT_WITH_CUDA
  std::vector<Tensor> on_cuda;
#endif
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
#ifdef DPT_WITH_CUDA
    if (t.device().is_cuda()) {
      DPT_CHECK(on_cuda.empty() || on_cuda.front().device() == t.device())
          << "non-finite check: tensors on " << on_cuda.front().device().str() << " and " << t.device().str();
      on_cuda.push_back(cuda::contiguous(t));
      continue;
    }
#endif
    Tensor c = t.contiguous();
    if (!finite_f32(c.data<float>(), c.numel())) return false;
  }
#ifdef DPT_WITH_CUDA
  if (!on_cuda.empty()) return cuda::all_finite(on_cuda, on_cuda.front().device().index);
#endif
  return true;
}

}  // namespace

bool gradients_finite(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(p.grad());
  return tensors_finite(grads);
}

NonfiniteGuard::NonfiniteGuard(const nn::Module& model, const Optimizer& optimizer, bool keep_buffers,
                               bool check_loss)
    : optimizer_(optimizer),
      buffers_(model.named_buffers()),
      keep_buffers_(keep_buffers),
      check_loss_(check_loss) {
  if (keep_buffers_)
    for (const auto& [name, t] : buffers_) saved_.emplace_back(name, t.clone());
}

void NonfiniteGuard::before_forward() {
  if (!keep_buffers_) return;
  for (size_t i = 0; i < buffers_.size(); ++i) saved_[i].second.copy_from(buffers_[i].second);
}

bool NonfiniteGuard::step_finite(const Tensor& loss) {
  // The loss joins the gradients' check, so a CUDA step reads back one flag.
  std::vector<Tensor> checked = optimizer_.step_gradients();
  if (check_loss_) checked.push_back(loss.detach());
  const bool ok = optimizer_.all_ranks(tensors_finite(checked));
  if (!ok && keep_buffers_) {
    autograd::NoGrad no_grad;
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].second.copy_from(saved_[i].second);
  }
  return ok;
}

}  // namespace dpt::optim
