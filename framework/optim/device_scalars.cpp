#include "optim/device_scalars.h"

#include "core/error.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/allocator.h"
#include "backend/cuda/upload.h"
#endif

namespace dpt::cuda {

#ifdef DPT_WITH_CUDA
void UploadDelete::operator()(Upload* upload) const { delete upload; }
#else
void UploadDelete::operator()(Upload*) const {}
#endif

}  // namespace dpt::cuda

namespace dpt::optim {

DeviceScalars::DeviceScalars(size_t count, Device device, const char* owner)
    : device_(device), host_(count, 0.0f) {
  DPT_CHECK(device.is_cuda()) << owner
                              << ": device-resident step values (for CUDA graphs) need parameters on a "
                              << "CUDA device, they are on " << device.str();
#ifdef DPT_WITH_CUDA
  on_device_ = static_cast<float*>(cuda::device_alloc(count * sizeof(float), device.index));
  upload_.reset(new cuda::Upload(count * sizeof(float), device.index));
#else
  DPT_FAIL() << owner << ": CUDA graphs need the CUDA backend, which this build lacks";
#endif
}

DeviceScalars::~DeviceScalars() {
#ifdef DPT_WITH_CUDA
  upload_.reset();  // waits for its last copy into on_device_
  try {
    cuda::device_free(on_device_, device_.index);
  } catch (...) {
  }
#endif
}

void DeviceScalars::upload() {
#ifdef DPT_WITH_CUDA
  upload_->copy(on_device_, host_.data(), host_.size() * sizeof(float));
#endif
}

const float* DeviceScalars::device_ptr(size_t i) const {
  DPT_CHECK(i < host_.size()) << "device scalar " << i << " of " << host_.size();
  return on_device_ + i;
}

}  // namespace dpt::optim
