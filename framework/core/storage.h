// Raw bytes on one device, shared by every tensor that views them. Memory comes from the
// device's backend: 64-byte aligned host memory on CPU, the caching allocator on CUDA.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

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
};

// Registers the backend for a device type. Called once, before the first tensor on it.
void device_backend_register(DeviceType type, DeviceBackend* backend);
// Throws Error naming the device when no backend is registered (e.g. a CPU-only build).
DeviceBackend& device_backend(DeviceType type);

class Storage {
 public:
  Storage(size_t bytes, Device device);
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
};

// Copies `bytes` from src to dst, whichever devices they are on.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

}  // namespace dpt
