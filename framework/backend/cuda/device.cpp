// Device count and selection. The count is probed once, on first use and never at static
// initialisation, so loading libdpt on a machine without a GPU touches no driver.
#include "backend/cuda/device.h"

#include "backend/cuda/check.h"
#include "core/error.h"

namespace dpt::cuda {
namespace {

struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static const Probe result = [] {
    Probe p;
    cudaError_t status = cudaGetDeviceCount(&p.count);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();  // leave no stale error behind for later checks
      p.count = 0;
      p.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
    } else if (p.count == 0) {
      p.reason = "the CUDA driver reports 0 devices";
    }
    return p;
  }();
  return result;
}

// The current device, once `index` is known to be valid (so a GPU-less machine gets the
// "no CUDA device" message rather than cudaGetDevice's).
int current_device_checking(int index) {
  cuda_check_device(index);
  return cuda_current_device();
}

}  // namespace

int cuda_device_count() { return probe().count; }
bool cuda_available() { return cuda_device_count() > 0; }
const std::string& cuda_unavailable_reason() { return probe().reason; }

void cuda_check_device(int index) {
  int count = cuda_device_count();
  DPT_CHECK(count > 0) << "no CUDA device: cannot use cuda:" << index << " (" << cuda_unavailable_reason()
                       << ")";
  DPT_CHECK(index >= 0 && index < count)
      << "cuda:" << index << " does not exist: this process sees " << count << " CUDA device"
      << (count == 1 ? "" : "s") << " (cuda:0..cuda:" << count - 1 << ")";
}

void cuda_set_device(int index) {
  cuda_check_device(index);
  CUDA_CHECK(cudaSetDevice(index));
}

int cuda_current_device() {
  int index = 0;
  CUDA_CHECK(cudaGetDevice(&index));
  return index;
}

std::string cuda_device_name(int index) {
  cuda_check_device(index);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return prop.name;
}

std::array<unsigned char, 16> cuda_device_uuid(int index) {
  cuda_check_device(index);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  std::array<unsigned char, 16> uuid{};
  for (size_t i = 0; i < uuid.size(); ++i) uuid[i] = static_cast<unsigned char>(prop.uuid.bytes[i]);
  return uuid;
}

void cuda_synchronize(int index) {
  DeviceGuard guard(index);
  CUDA_CHECK(cudaDeviceSynchronize());
}

DeviceGuard::DeviceGuard(int index) : previous_(current_device_checking(index)), index_(index) {
  if (index_ != previous_) CUDA_CHECK(cudaSetDevice(index_));
}

DeviceGuard::~DeviceGuard() {
  // No throw from a destructor: restoring a device that was valid a moment ago can only
  // fail if the context is already broken, and the next checked call will say so.
  if (index_ != previous_) (void)cudaSetDevice(previous_);
}

}  // namespace dpt::cuda
