// Caching allocator for device memory, so that training reaches a steady state with no
// cudaMalloc or cudaFree (each one synchronises the device): freed blocks are kept per
// device and handed out again to requests of (nearly) the same size.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dpt::cuda {

struct AllocatorStats {
  size_t allocated_bytes = 0;       // held by live blocks (sizes as rounded by the allocator)
  size_t reserved_bytes = 0;        // allocated_bytes + bytes cached for reuse
  size_t peak_allocated_bytes = 0;  // highest allocated_bytes so far
  uint64_t num_device_mallocs = 0;  // cudaMalloc calls that succeeded
  uint64_t num_cache_hits = 0;      // requests served from the cache
  size_t pool_reserved_bytes = 0;   // part of reserved_bytes held by CUDA graphs' private pools
};

// Requires a valid device (dpt::Error "no CUDA device ..." otherwise). Returns a block of
// at least `bytes` on `device`, 512-byte aligned or better; nullptr for bytes == 0. Work on
// the block must be queued on the device's compute stream (context.h). On out-of-memory
// the cache is emptied and cudaMalloc tried once more, then dpt::Error gives the request
// and these stats.
void* device_alloc(size_t bytes, int device);
// Returns a block from device_alloc to the cache. nullptr is ignored.
void device_free(void* ptr, int device);

// A device_alloc block owned by a scope (kernel scratch, library workspaces). Freeing it
// at the end of the scope, after the work using it was queued, is safe: the block's next
// user is queued on the same compute stream, behind that work.
class DeviceBuffer {
 public:
  DeviceBuffer(size_t bytes, int device) : device_(device), ptr_(device_alloc(bytes, device)) {}
  ~DeviceBuffer() { device_free(ptr_, device_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  int device_;
  void* ptr_;
};

// For tests: while on, every block device_alloc hands out is first filled with 0xff bytes
// (NaN as f32, -1 as i64), on the compute stream, so a kernel that leaves part of its
// output unwritten, or reads memory it never initialised, cannot pass by luck.
void allocator_set_poison(bool enabled);

// Zeros for a device the allocator has not used (or that does not exist).
AllocatorStats allocator_stats(int device);
// Gives every cached, unused block (device and pinned host) back to the driver, except
// those CUDA graphs' pools hold. Not during a capture (dpt::Error).
void allocator_empty_cache();

// Private pools for CUDA graphs (graph.h): while a capture is in progress on a device,
// every device_alloc on it is served from the capture's pool and every block freed from
// the shared cache joins that pool, so no block a graph uses is handed to eager code while
// the graph can replay (core/block_cache.h has the rules). One capture per device at a time.
uint64_t allocator_pool_create(int device);
void allocator_capture_begin(int device, uint64_t pool);
void allocator_capture_end(int device);
// After the graph is destroyed: the pool's memory returns to the shared cache.
void allocator_pool_release(int device, uint64_t pool);

// Page-locked host memory, for the data loader's asynchronous host-to-device copies.
// Cached like device blocks; requires a CUDA device.
void* pinned_alloc(size_t bytes);
void pinned_free(void* ptr);

}  // namespace dpt::cuda
