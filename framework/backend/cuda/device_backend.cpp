// The DeviceBackend that core's Storage and copy_bytes use for DeviceType::cuda, and its
// registration. Registering only stores a pointer: no CUDA call runs at load time, so a
// machine without a GPU loads libdpt fine and gets "no CUDA device" on first use.
#include "backend/cuda/allocator.h"
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device.h"
#include "backend/cuda/graph.h"
#include "core/error.h"
#include "core/storage.h"

namespace dpt::cuda {
namespace {

class CudaBackend final : public DeviceBackend {
 public:
  void* allocate(size_t bytes, int device_index) override { return device_alloc(bytes, device_index); }

  void deallocate(void* ptr, size_t, int device_index) override { device_free(ptr, device_index); }

  // Copies go on the compute stream, after the kernels that produced the source. The host
  // waits whenever host memory is involved (its buffer may be pageable, or freed right
  // after), and for copies between devices; a copy within one device stays asynchronous.
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override {
    if (bytes == 0) return;
    if (dst_device.is_cuda() && src_device.is_cuda()) {
      if (dst_device.index == src_device.index) {
        DeviceGuard guard(dst_device.index);
        CUDA_CHECK(
            cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_stream(dst_device.index)));
        return;
      }
      DPT_CHECK(!capture_active(src_device.index) && !capture_active(dst_device.index))
          << "a copy from " << src_device.str() << " to " << dst_device.str()
          << " inside a CUDA graph capture (it waits for both devices)";
      device_context(src_device.index).stream().synchronize();
      const Stream& stream = device_context(dst_device.index).stream();
      DeviceGuard guard(dst_device.index);
      CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, stream.get()));
      stream.synchronize();
      return;
    }
    Device device = dst_device.is_cuda() ? dst_device : src_device;
    // A graph cannot replay a copy from pageable host memory, nor the wait after it.
    DPT_CHECK(!capture_active(device.index))
        << "a copy between the host and " << device.str() << " (" << bytes
        << " bytes) inside a CUDA graph capture: a captured step must not read values back or copy from the "
           "host (upload inputs before the replay, read outputs after it)";
    cudaMemcpyKind kind = dst_device.is_cuda() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    const Stream& stream = device_context(device.index).stream();
    DeviceGuard guard(device.index);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream.get()));
    stream.synchronize();
  }

  void fill_zero(void* ptr, size_t bytes, int device_index) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_index);
    CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, compute_stream(device_index)));
  }

  int device_count() override { return cuda_device_count(); }
  std::string unavailable_reason() override { return cuda_unavailable_reason(); }
  void synchronize(int device_index) override { cuda_synchronize(device_index); }
  std::string name(int device_index) override { return cuda_device_name(device_index); }
  std::array<unsigned char, 16> uuid(int device_index) override { return cuda_device_uuid(device_index); }
  void set_current(int device_index) override { cuda_set_device(device_index); }
};

[[maybe_unused]] const bool registered = [] {
  // Leaked, like the allocator: storages freed during static destruction still call it.
  device_backend_register(DeviceType::cuda, new CudaBackend());
  return true;
}();

}  // namespace
}  // namespace dpt::cuda
