#include "core/storage.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace dpt {
namespace {

class CpuBackend final : public DeviceBackend {
 public:
  void* allocate(size_t bytes, int) override {
    // 64 bytes: a cache line and an AVX-512 register, what oneDNN wants.
    size_t rounded = (bytes + 63) / 64 * 64;
    void* ptr = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!ptr) throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    return ptr;
  }
  void deallocate(void* ptr, size_t, int) override { std::free(ptr); }
  void copy(void* dst, Device, const void* src, Device, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void fill_zero(void* ptr, size_t bytes, int) override { std::memset(ptr, 0, bytes); }
};

DeviceBackend* g_backends[2] = {nullptr, nullptr};

}  // namespace

void device_backend_register(DeviceType type, DeviceBackend* backend) {
  g_backends[static_cast<int>(type)] = backend;
}

DeviceBackend& device_backend(DeviceType type) {
  static CpuBackend cpu_backend;
  if (type == DeviceType::cpu) return cpu_backend;
  DeviceBackend* backend = g_backends[static_cast<int>(type)];
  DPT_CHECK(backend) << "no CUDA support in this build of dpt (configure with -DDPT_CUDA=ON on a "
                        "machine with the CUDA toolkit, cuDNN and NCCL)";
  return *backend;
}

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  data_ = device_backend(device.type).allocate(bytes, device.index);
}

Storage::~Storage() { device_backend(device_.type).deallocate(data_, bytes_, device_.index); }

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  // A copy that touches a CUDA device is the CUDA backend's job, whichever side it is on.
  Device owner = dst_device.is_cuda() ? dst_device : src_device;
  device_backend(owner.type).copy(dst, dst_device, src, src_device, bytes);
}

}  // namespace dpt
