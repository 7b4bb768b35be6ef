// Raw bytes on one device, shared by every tensor that views them. Memory comes from the
// device's backend: 64-byte aligned host memory on CPU, the caching allocator on CUDA.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/device.h"

namespace dpt {

// What core needs from a device: memory and byte copies. backend/cuda registers one for
// DeviceType::cuda; core itself provides the CPU one.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual void* allocate(size_t bytes, int device_index) = 0;
  virtual void deallocate(void* ptr, size_t bytes, int device_index) = 0;
  // Copies bytes between this device and the host, or within this device.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) = 0;
  virtual void fill_zero(void* ptr, size_t bytes, int device_index) = 0;
  // Devices of this type the process can use. Never throws: 0 where none can be (no
  // driver, no device, a driver older than the runtime), with the reason in
  // unavailable_reason().
  virtual int device_count() = 0;
  virtual std::string unavailable_reason() { return ""; }
  // Blocks the calling thread until all work queued on the device is done.
  virtual void synchronize(int device_index) = 0;
  // What a rank's device choice reads and sets (comm/rank_device.cpp): the device's
  // name, its 16-byte UUID (ranks with equal UUIDs share one device), and the device this
  // thread's work goes to by default.
  virtual std::string name(int) { return "cpu"; }
  virtual std::array<unsigned char, 16> uuid(int) { return {}; }
  virtual void set_current(int) {}
};

// Registers the backend for a device type. Called once, before the first tensor on it.
void device_backend_register(DeviceType type, DeviceBackend* backend);
// Throws Error naming the device when no backend is registered (e.g. a CPU-only build).
DeviceBackend& device_backend(DeviceType type);

// Devices of `type` this process can use: 1 for the CPU; for CUDA the registered
// backend's count, 0 in a build without the CUDA backend. Never throws.
int device_count(DeviceType type);
// Why device_count(type) is 0, e.g. "no CUDA backend in this build" or the driver's
// reason; empty when there are devices.
std::string device_unavailable_reason(DeviceType type);
// Waits for all work queued on `device` (nothing to wait for on the CPU).
void device_synchronize(Device device);

// Host memory held by live CPU storages (as allocated: rounded up, not counting what the
// allocator keeps idle for reuse), and the most held at once since the last
// host_memory_reset_peak(): what a step keeps alive, e.g. a pipeline schedule's
// activations. Process-wide; the CUDA allocator has its own (backend/cuda/allocator.h).
struct HostMemoryStats {
  size_t allocated_bytes = 0;
  size_t peak_allocated_bytes = 0;
};
HostMemoryStats host_memory_stats();
void host_memory_reset_peak();  // peak := allocated now

class Storage {
 public:
  Storage(size_t bytes, Device device);
  // Memory someone else owns (e.g. a shared-memory segment): `owner` is kept alive while
  // the storage lives, and the bytes go back with it, not to the device's allocator.
  Storage(void* data, size_t bytes, Device device, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // Counts writes that replace a tensor's values wholesale (copy_from, zero_, fill_, an
  // optimizer's update): a copy derived from this storage (nn/compute.h's bf16 weights)
  // is stale when the count has moved since it was made.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> version_{0};
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  std::shared_ptr<void> owner_;  // set: external memory
};

// Copies `bytes` from src to dst, whichever devices they are on.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

}  // namespace dpt
