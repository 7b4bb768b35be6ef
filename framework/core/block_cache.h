// The bookkeeping of a caching allocator for one device, kept apart from the device: which
// blocks are live, which are cached for reuse and by whom, and the private pools that CUDA
// graph captures allocate from. backend/cuda/allocator.cpp drives it with cudaMalloc'd
// blocks; being plain C++, its rules are tested on any machine (tests/test_block_cache.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>

namespace dpt {

// Free blocks by size. A cached block serves a request if it wastes at most an eighth of
// it, so a slightly smaller last batch reuses the full batch's blocks but a tiny request
// never pins a huge block.
class FreeList {
 public:
  // Removes and returns the smallest block that fits, or nullptr; sets *block_bytes.
  void* take(size_t bytes, size_t* block_bytes);
  void put(void* ptr, size_t bytes) { blocks_.emplace(bytes, ptr); }
  bool empty() const { return blocks_.empty(); }
  // Hands every block to `release(ptr, bytes)` and forgets it.
  template <class Release>
  void clear(Release release) {
    while (!blocks_.empty()) {
      auto it = blocks_.begin();
      void* ptr = it->second;
      size_t bytes = it->first;
      blocks_.erase(it);
      release(ptr, bytes);
    }
  }

 private:
  std::multimap<size_t, void*> blocks_;
};

// Pools: eager code allocates from the shared pool. A graph capture allocates from its own
// pool, whose blocks the graph reads and writes on every replay: they are never handed to
// code outside the capture while the graph lives. During the capture a freed block may be
// taken again later in the same capture (its next user is queued after its last one, in
// capture order, so every replay keeps that order too). A shared block (or one of a released
// pool) freed during a capture joins the capture's pool: the graph may have used it, so eager code must not
// get it back while the graph can replay. When the graph is destroyed its pool is released: free blocks go
// back to the shared pool at once, live ones (a captured step's outputs) when they are freed. A block of one
// graph's pool freed during another graph's capture (a tensor passed from one graph to the next) goes back to
// its own pool: such graphs must be replayed in the order they were captured, as with PyTorch's shared pools.
//
// Not thread-safe: the allocator calls it under its lock.
class BlockCache {
 public:
  using PoolId = uint64_t;
  static constexpr PoolId kShared = 0;

  struct Counters {
    size_t allocated_bytes = 0;       // live blocks
    size_t reserved_bytes = 0;        // live and cached blocks, all pools
    size_t peak_allocated_bytes = 0;  // highest allocated_bytes so far
    size_t pool_bytes = 0;            // reserved by private (graph) pools, live or free
    uint64_t cache_hits = 0;          // requests served from a free list
  };

  BlockCache();

  // A cached block of at least `bytes` from the pool requests go to now (the capture's,
  // else the shared one), marked live; nullptr when none fits: the caller then gets new
  // memory and calls add().
  void* take(size_t bytes);
  // Records new memory of `bytes` as a live block of the pool requests go to now.
  void add(void* ptr, size_t bytes);
  // Ends the use of a live block (see the pool rules above). False when `ptr` is not live.
  bool release(void* ptr);
  // The size of a live block; 0 when `ptr` is not live.
  size_t block_bytes(void* ptr) const;
  // Hands the shared pool's free blocks to `free(ptr, bytes)` and forgets them (to empty
  // the cache). Private pools keep theirs: a graph may still replay over them.
  template <class Free>
  void trim(Free free) {
    pools_.at(kShared).free.clear([&](void* ptr, size_t bytes) {
      counters_.reserved_bytes -= bytes;
      free(ptr, bytes);
    });
  }

  // True when the shared pool holds free blocks, i.e. trim() has something to give back.
  bool shared_cached() const { return !pools_.at(kShared).free.empty(); }

  // A new, empty private pool.
  PoolId pool_create();
  // Until capture_end(), requests are served from `pool` and shared blocks freed join it.
  // Requires: no capture in progress, `pool` made by pool_create and not released.
  void capture_begin(PoolId pool);
  void capture_end();
  bool capturing() const { return capture_ != kShared; }
  // The graph that used `pool` is gone: its free blocks return to the shared pool now, its
  // live blocks when they are freed. Requires: `pool` is not being captured into.
  void pool_release(PoolId pool);
  // Bytes a private pool holds (live or free); 0 for an unknown or fully returned pool.
  size_t pool_bytes(PoolId pool) const;

  const Counters& counters() const { return counters_; }

 private:
  struct Block {
    size_t bytes;
    PoolId pool;
  };
  struct Pool {
    FreeList free;
    size_t bytes = 0;  // live and free blocks of this pool
    size_t live = 0;   // live blocks
    bool released = false;
  };

  void erase_if_empty(PoolId pool);

  std::unordered_map<void*, Block> live_;
  std::map<PoolId, Pool> pools_;  // kShared is always there
  PoolId capture_ = kShared;      // kShared: no capture
  PoolId next_pool_ = 1;
  Counters counters_;
};

}  // namespace dpt
