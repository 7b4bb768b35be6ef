// Which CUDA devices this process sees, and choosing one. Safe on machines with no driver
// or no GPU: the queries answer 0 / false there instead of throwing, so a CPU-only run
// and the test suite load and run the CUDA build of dpt unchanged.
#pragma once

#include <array>
#include <string>

namespace dpt::cuda {

// Number of visible devices. Never throws: 0 when there is no driver, no device or the
// runtime fails to start (the reason is then cuda_unavailable_reason()). Probed once.
int cuda_device_count();
bool cuda_available();  // cuda_device_count() > 0
// Why cuda_device_count() is 0, e.g. "cudaGetDeviceCount: no CUDA-capable device is
// detected"; empty when devices are present.
const std::string& cuda_unavailable_reason();

// Throws dpt::Error unless 0 <= index < cuda_device_count(). With no device at all the
// message starts "no CUDA device" and gives the reason.
void cuda_check_device(int index);

// Requires a valid index; makes it the calling thread's current device.
void cuda_set_device(int index);
int cuda_current_device();
// Requires a valid index; e.g. "NVIDIA H200".
std::string cuda_device_name(int index);
// Requires a valid index; the GPU's UUID (what nvidia-smi -L prints as GPU-...), the same
// in every process that sees the device, whatever CUDA_VISIBLE_DEVICES numbers it.
std::array<unsigned char, 16> cuda_device_uuid(int index);
// Waits for all work on the device (every stream) to finish.
void cuda_synchronize(int index);

// Makes `index` the current device for a scope and restores the previous one after,
// so that library code never leaves the caller on a device it did not choose.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
  int index_;
};

}  // namespace dpt::cuda
