#include "optim/nonfinite.h"

#include <cmath>
#include <cstring>

#include "autograd/node.h"

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

}  // namespace

bool gradients_finite(const std::vector<Tensor>& params) {
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    Tensor c = g.to(Device::cpu()).contiguous();
    if (!finite_f32(c.data<float>(), c.numel())) return false;
  }
  return true;
}

NonfiniteGuard::NonfiniteGuard(const nn::Module& model, bool keep_buffers, bool check_loss)
    : params_(model.parameters()),
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
  bool ok = gradients_finite(params_) && (!check_loss_ || std::isfinite(loss.item()));
  if (!ok && keep_buffers_) {
    autograd::NoGrad no_grad;
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].second.copy_from(saved_[i].second);
  }
  return ok;
}

}  // namespace dpt::optim
