// What the optimizers share for parameters on any device. DeviceScalars: the few f32
// values of a step that a captured CUDA graph must not freeze (learning rate, AdamW's bias
// corrections, EMA's decay), uploaded before each replay and read by the kernels on the
// device (optimizer.h: step_prepare / step_apply); on the CPU they live in host memory, so
// the split step runs, and is tested, there too. prepare_update: the checks before an
// update, with optimizer state following its parameter to the parameter's device.
// SlotBatch: a group's parameters batched into one fused multi-tensor update per device.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::optim {

class DeviceScalars {
 public:
  // `count` values on `device`.
  DeviceScalars(size_t count, Device device)
      : host_(count, 0.0f),
        values_(Tensor::zeros({static_cast<int64_t>(count)}, DType::f32, device)),
        upload_(kernels_for(device).upload_make(count * sizeof(float), device.index)) {}

  void set(size_t i, float value) { host_.at(i) = value; }
  // Queues the copy of every value to the device, ahead of the work queued after it.
  void upload() { upload_->copy(values_.raw_data(), host_.data(), host_.size() * sizeof(float)); }
  // Where value i lives on the device; stable for this object's life.
  const float* device_ptr(size_t i) const {
    DPT_CHECK(i < host_.size()) << "device scalar " << i << " of " << host_.size();
    return values_.data<float>() + i;
  }
  Device device() const { return values_.device(); }

 private:
  std::vector<float> host_;
  Tensor values_;
  // Declared after values_, so destroyed before them: an Upload's destructor waits for its
  // last copy into them (a CUDA stream may still be writing there).
  std::unique_ptr<Upload> upload_;
};

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
