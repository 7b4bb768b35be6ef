// What the optimizers share for parameters on any device: the checks before an update
// (with optimizer state following its parameter to the parameter's device), and the
// batching of a group's parameters into one fused multi-tensor update per device.
#pragma once

#include <functional>
#include <initializer_list>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "optim/device_scalars.h"

namespace dpt::optim {

// Requires: p and p.grad() contiguous f32 of one shape on one device, the device of
// `values` when given (step_apply), else an Error naming the optimizer. Ensures: each state
// buffer is on p's device; one made elsewhere (the model was moved after the optimizer was
// built) is moved there, values kept.
inline void prepare_update(const char* optimizer, const Tensor& p, std::initializer_list<Tensor*> state,
                           const DeviceScalars* values = nullptr) {
  const Tensor& g = p.grad();
  DPT_CHECK(!values || values->device() == p.device())
      << optimizer << ": step_apply's values are on " << values->device().str() << ", but a parameter "
      << shape_str(p.shape()) << " is on " << p.device().str() << " (one device per model)";
  DPT_CHECK(p.dtype() == DType::f32 && g.dtype() == DType::f32 && g.shape() == p.shape() &&
            g.device() == p.device() && p.is_contiguous() && g.is_contiguous())
      << optimizer << ": parameter " << shape_str(p.shape()) << " on " << p.device().str()
      << " and its gradient " << shape_str(g.shape()) << " on " << g.device().str()
      << " must be contiguous f32 of one shape on one device";
  for (Tensor* s : state)
    if (s->device() != p.device()) *s = s->to(p.device());
  p.storage()->bump_version();  // copies made from p (bf16 weights) are stale after this
}

// Collects the parameters of a group for one fused update: `launch(slots, device)` runs
// when the device changes and at flush(), which the caller must call at the end.
template <class Slot>
class SlotBatch {
 public:
  using Launch = std::function<void(const std::vector<Slot>&, Device device)>;
  explicit SlotBatch(Launch launch) : launch_(std::move(launch)) {}

  void add(Device device, const Slot& slot) {
    if (!slots_.empty() && device != device_) flush();
    device_ = device;
    slots_.push_back(slot);
  }
  void flush() {
    if (!slots_.empty()) launch_(slots_, device_);
    slots_.clear();
  }

 private:
  Launch launch_;
  std::vector<Slot> slots_;
  Device device_;
};

}  // namespace dpt::optim
