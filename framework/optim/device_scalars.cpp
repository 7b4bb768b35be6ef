#include "optim/device_scalars.h"

#include "core/error.h"

namespace dpt::optim {

DeviceScalars::DeviceScalars(size_t count, Device device)
    : host_(count, 0.0f),
      values_(Tensor::zeros({static_cast<int64_t>(count)}, DType::f32, device)),
      upload_(kernels_for(device).upload_make(count * sizeof(float), device.index)) {}

void DeviceScalars::upload() { upload_->copy(values_.raw_data(), host_.data(), host_.size() * sizeof(float)); }

const float* DeviceScalars::device_ptr(size_t i) const {
  DPT_CHECK(i < host_.size()) << "device scalar " << i << " of " << host_.size();
  return values_.data<float>() + i;
}

}  // namespace dpt::optim
