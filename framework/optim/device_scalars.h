// The few f32 values of one step that a captured CUDA graph must not freeze: the learning
// rate, AdamW's bias corrections and decays, EMA's decay. The host computes them as an
// eager step would and uploads them before each replay; the update kernels read them from
// device memory as they run (optimizer.h: step_prepare / step_apply).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/device.h"

namespace dpt::cuda {
class Upload;
// Deletes an Upload (backend/cuda/upload.h), so that headers hold one without including
// CUDA's; a build without the CUDA backend never makes one.
struct UploadDelete {
  void operator()(Upload* upload) const;
};
}  // namespace dpt::cuda

namespace dpt::optim {

class DeviceScalars {
 public:
  // `count` values on CUDA device `device` (dpt::Error for a CPU device or a build without
  // CUDA, naming `owner`, e.g. "sgd").
  DeviceScalars(size_t count, Device device, const char* owner);
  ~DeviceScalars();
  DeviceScalars(const DeviceScalars&) = delete;
  DeviceScalars& operator=(const DeviceScalars&) = delete;

  void set(size_t i, float value) { host_.at(i) = value; }
  // Queues the copy of every value to the device, ahead of the work queued after it.
  void upload();
  // Where value i lives on the device; stable for this object's life.
  const float* device_ptr(size_t i) const;
  Device device() const { return device_; }

 private:
  Device device_;
  std::vector<float> host_;
  float* on_device_ = nullptr;
  std::unique_ptr<cuda::Upload, cuda::UploadDelete> upload_;
};

}  // namespace dpt::optim
