// The caching allocator: per device a BlockCache (core/block_cache.h: best-fit free lists,
// the shared pool and CUDA graphs' private pools), one free list for pinned host memory,
// all behind one mutex. A freed block is reusable at once because every kernel
// and copy on a device is queued on that device's single compute stream, so later work on
// the block runs after earlier work on it. A block used on another stream (NCCL's) will
// need a record_stream-style event before it is reused; that comes with the NCCL backend.
#include "backend/cuda/allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device.h"
#include "core/block_cache.h"
#include "core/error.h"

namespace dpt::cuda {
namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;  // requests up to 1 MiB ...
constexpr size_t kSmallRound = 512;              // ... round up to 512 bytes,
constexpr size_t kLargeRound = size_t{2} << 20;  // larger ones to 2 MiB

size_t round_size(size_t bytes) {
  size_t unit = bytes <= kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + unit - 1) / unit * unit;
}

struct DeviceCache {
  BlockCache blocks;
  uint64_t num_device_mallocs = 0;
};

struct PinnedCache {
  FreeList free_blocks;
  std::unordered_map<void*, size_t> live;
};

std::string format_bytes(size_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%zu bytes (%.2f MiB)", bytes, static_cast<double>(bytes) / (1 << 20));
  return text;
}

class Allocator {
 public:
  Allocator() : devices_(cuda_device_count()) {}

  void* allocate(size_t bytes, int device) {
    cuda_check_device(device);
    if (bytes == 0) return nullptr;
    size_t rounded = round_size(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceCache& cache = devices_[device];
    if (void* ptr = cache.blocks.take(rounded)) return ptr;
    DeviceGuard guard(device);
    void* ptr = malloc_or_null(rounded);
    if (!ptr && !cache.blocks.capturing()) {
      // Not during a capture: emptying the cache synchronises the device and frees, which
      // a capture forbids; a capture's OOM fails below.
      release_cached(device);
      ptr = malloc_or_null(rounded);
    }
    if (!ptr) fail_out_of_memory(bytes, rounded, device);
    ++cache.num_device_mallocs;
    cache.blocks.add(ptr, rounded);
    return ptr;
  }

  void deallocate(void* ptr, int device) {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    DPT_CHECK(device >= 0 && device < static_cast<int>(devices_.size()))
        << "device_free: cuda:" << device << " is not a device this process allocated on";
    DPT_CHECK(devices_[device].blocks.release(ptr))
        << "device_free: " << ptr << " was not allocated on cuda:" << device
        << " by the caching allocator, or was already freed";
  }

  AllocatorStats stats(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (device < 0 || device >= static_cast<int>(devices_.size())) return {};
    return stats_of(devices_[device]);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int device = 0; device < static_cast<int>(devices_.size()); ++device) {
      if (!devices_[device].blocks.shared_cached()) continue;
      DPT_CHECK(!devices_[device].blocks.capturing())
          << "allocator_empty_cache: cuda:" << device << " is capturing a CUDA graph (freeing memory would "
          << "synchronise the device, which a capture forbids)";
      DeviceGuard guard(device);
      release_cached(device);
    }
    release_pinned_cached();
  }

  // f(the BlockCache of `device`), under the lock: the graph pools' calls.
  template <class F>
  auto with_blocks(int device, F f) {
    cuda_check_device(device);
    std::lock_guard<std::mutex> lock(mutex_);
    return f(devices_[device].blocks);
  }

  void* pinned_allocate(size_t bytes) {
    DPT_CHECK(cuda_available()) << "no CUDA device: pinned host memory needs the CUDA driver ("
                                << cuda_unavailable_reason() << ")";
    if (bytes == 0) return nullptr;
    size_t rounded = round_size(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    size_t block_bytes = rounded;
    void* ptr = pinned_.free_blocks.take(rounded, &block_bytes);
    if (!ptr) {
      ptr = host_alloc_or_null(rounded);
      if (!ptr) {
        release_pinned_cached();
        ptr = host_alloc_or_null(rounded);
      }
      DPT_CHECK(ptr) << "out of pinned host memory allocating " << format_bytes(bytes)
                     << " with cudaHostAlloc, after emptying the pinned cache";
    }
    pinned_.live.emplace(ptr, block_bytes);
    return ptr;
  }

  void pinned_deallocate(void* ptr) {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pinned_.live.find(ptr);
    DPT_CHECK(it != pinned_.live.end())
        << "pinned_free: " << ptr << " was not allocated by pinned_alloc, or was already freed";
    pinned_.free_blocks.put(ptr, it->second);
    pinned_.live.erase(it);
  }

 private:
  static AllocatorStats stats_of(const DeviceCache& cache) {
    const BlockCache::Counters& c = cache.blocks.counters();
    return {c.allocated_bytes, c.reserved_bytes, c.peak_allocated_bytes, cache.num_device_mallocs, c.cache_hits,
            c.pool_bytes};
  }

  // nullptr on out-of-memory; any other failure throws. cudaMalloc is one of the calls a
  // capture in ThreadLocal mode forbids on its thread, because a graph does not replay it;
  // here that is what we want (the block joins the capture's pool and outlives every
  // replay), so the calling thread relaxes the rule for this one call, as PyTorch does.
  static void* malloc_or_null(size_t bytes) {
    void* ptr = nullptr;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaError_t status = cudaMalloc(&ptr, bytes);
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    return null_on_oom(status, ptr);
  }

  static void* host_alloc_or_null(size_t bytes) {
    void* ptr = nullptr;
    return null_on_oom(cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable), ptr);
  }

  // ptr when the allocation succeeded, nullptr on out-of-memory; any other failure throws.
  static void* null_on_oom(cudaError_t status, void* ptr) {
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    CUDA_CHECK(status);
    return ptr;
  }

  // Caller holds the lock and has made `device` current. Cached blocks may still be read
  // or written by queued kernels, so the device finishes its work before they go.
  void release_cached(int device) {
    CUDA_CHECK(cudaDeviceSynchronize());
    devices_[device].blocks.trim([](void* ptr, size_t) { CUDA_CHECK(cudaFree(ptr)); });
  }

  // Caller holds the lock. A cached pinned block may be the source of a copy still in
  // flight, so every device this allocator has used finishes its work first. (Until
  // pinned blocks carry events, the data loader must also finish its copies from a block
  // before calling pinned_free on it.)
  void release_pinned_cached() {
    bool any = false;
    pinned_.free_blocks.clear([&](void* ptr, size_t) {
      if (!any) {
        synchronize_all();
        any = true;
      }
      CUDA_CHECK(cudaFreeHost(ptr));
    });
  }

  // Only devices with blocks: touching the others would create their CUDA contexts.
  void synchronize_all() {
    for (int device = 0; device < static_cast<int>(devices_.size()); ++device) {
      if (devices_[device].blocks.counters().reserved_bytes == 0) continue;
      DeviceGuard guard(device);
      CUDA_CHECK(cudaDeviceSynchronize());
    }
  }

  [[noreturn]] void fail_out_of_memory(size_t bytes, size_t rounded, int device) {
    const AllocatorStats s = stats_of(devices_[device]);
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
    DPT_FAIL() << "CUDA out of memory on cuda:" << device << ": cannot allocate " << format_bytes(bytes)
               << " (rounded to " << rounded << ")"
               << (devices_[device].blocks.capturing() ? " during a CUDA graph capture, which cannot empty the cache"
                                                       : " even after emptying the cache")
               << "; allocator: allocated "
               << format_bytes(s.allocated_bytes) << ", reserved " << format_bytes(s.reserved_bytes)
               << ", peak " << format_bytes(s.peak_allocated_bytes) << ", " << s.num_device_mallocs
               << " cudaMalloc calls, " << s.num_cache_hits
               << " cache hits, " << format_bytes(s.pool_reserved_bytes) << " held by CUDA graphs; device: " << format_bytes(free_bytes) << " free of "
               << format_bytes(total_bytes);
  }

  std::mutex mutex_;
  std::vector<DeviceCache> devices_;  // indexed by device, sized once
  PinnedCache pinned_;
};

// Leaked on purpose: tensors destroyed during static destruction still return their
// blocks here, and the driver reclaims device memory at exit anyway.
Allocator& allocator() {
  static Allocator* instance = new Allocator();
  return *instance;
}

std::atomic<bool> poison_allocations{false};

}  // namespace

void allocator_set_poison(bool enabled) { poison_allocations = enabled; }

void* device_alloc(size_t bytes, int device) {
  void* ptr = allocator().allocate(bytes, device);
  if (ptr && poison_allocations) {
    DeviceGuard guard(device);
    CUDA_CHECK(cudaMemsetAsync(ptr, 0xff, bytes, compute_stream(device)));
  }
  return ptr;
}

void device_free(void* ptr, int device) { allocator().deallocate(ptr, device); }
AllocatorStats allocator_stats(int device) { return allocator().stats(device); }
void allocator_empty_cache() { allocator().empty_cache(); }
uint64_t allocator_pool_create(int device) {
  return allocator().with_blocks(device, [](BlockCache& b) { return b.pool_create(); });
}
void allocator_capture_begin(int device, uint64_t pool) {
  allocator().with_blocks(device, [&](BlockCache& b) { b.capture_begin(pool); });
}
void allocator_capture_end(int device) {
  allocator().with_blocks(device, [](BlockCache& b) { b.capture_end(); });
}
void allocator_pool_release(int device, uint64_t pool) {
  allocator().with_blocks(device, [&](BlockCache& b) { b.pool_release(pool); });
}
void* pinned_alloc(size_t bytes) { return allocator().pinned_allocate(bytes); }
void pinned_free(void* ptr) { allocator().pinned_deallocate(ptr); }

}  // namespace dpt::cuda
