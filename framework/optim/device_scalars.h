// The few f32 values of a step that a captured CUDA graph must not freeze (learning rate,
// AdamW's bias corrections, EMA's decay): uploaded before each replay, read by the kernels
// on the device (optimizer.h: step_prepare / step_apply). On the CPU they live in host
// memory, so the split step runs, and is tested, there too.
#pragma once

#include <cstddef>
#include <memory>
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

}  // namespace dpt::optim
