#include "core/block_cache.h"

#include <algorithm>

#include "core/error.h"

namespace dpt {

void* FreeList::take(size_t bytes, size_t* block_bytes) {
  auto it = blocks_.lower_bound(bytes);
  if (it == blocks_.end() || it->first > bytes + bytes / 8) return nullptr;
  void* ptr = it->second;
  *block_bytes = it->first;
  blocks_.erase(it);
  return ptr;
}

BlockCache::BlockCache() { pools_.emplace(kShared, Pool()); }

void* BlockCache::take(size_t bytes) {
  Pool& pool = pools_.at(capture_);
  size_t block = 0;
  void* ptr = pool.free.take(bytes, &block);
  if (!ptr) return nullptr;
  live_.emplace(ptr, Block{block, capture_});
  ++pool.live;
  ++counters_.cache_hits;
  counters_.allocated_bytes += block;
  counters_.peak_allocated_bytes = std::max(counters_.peak_allocated_bytes, counters_.allocated_bytes);
  return ptr;
}

void BlockCache::add(void* ptr, size_t bytes) {
  DPT_CHECK(live_.find(ptr) == live_.end()) << "block cache: new block " << ptr << " is already live";
  Pool& pool = pools_.at(capture_);
  live_.emplace(ptr, Block{bytes, capture_});
  ++pool.live;
  pool.bytes += bytes;
  if (capture_ != kShared) counters_.pool_bytes += bytes;
  counters_.reserved_bytes += bytes;
  counters_.allocated_bytes += bytes;
  counters_.peak_allocated_bytes = std::max(counters_.peak_allocated_bytes, counters_.allocated_bytes);
}

bool BlockCache::release(void* ptr) {
  auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  const Block block = it->second;
  live_.erase(it);
  counters_.allocated_bytes -= block.bytes;
  Pool& from = pools_.at(block.pool);
  --from.live;
  PoolId to = block.pool;
  if (capturing() && (block.pool == kShared || from.released))
    to = capture_;  // the capture may have used it: its graph keeps it
  else if (from.released)
    to = kShared;  // its graph is gone
  if (to != block.pool) {
    from.bytes -= block.bytes;
    pools_.at(to).bytes += block.bytes;
    if (block.pool != kShared) counters_.pool_bytes -= block.bytes;
    if (to != kShared) counters_.pool_bytes += block.bytes;
  }
  pools_.at(to).free.put(ptr, block.bytes);
  erase_if_empty(block.pool);
  return true;
}

size_t BlockCache::block_bytes(void* ptr) const {
  auto it = live_.find(ptr);
  return it == live_.end() ? 0 : it->second.bytes;
}

BlockCache::PoolId BlockCache::pool_create() {
  PoolId id = next_pool_++;
  pools_.emplace(id, Pool());
  return id;
}

void BlockCache::capture_begin(PoolId pool) {
  DPT_CHECK(!capturing()) << "block cache: a capture into pool " << capture_
                          << " is in progress; one capture per device at a time";
  auto it = pools_.find(pool);
  DPT_CHECK(pool != kShared && it != pools_.end() && !it->second.released)
      << "block cache: pool " << pool << " is not a live private pool";
  capture_ = pool;
}

void BlockCache::capture_end() { capture_ = kShared; }

void BlockCache::pool_release(PoolId pool) {
  auto it = pools_.find(pool);
  DPT_CHECK(pool != kShared && it != pools_.end() && !it->second.released)
      << "block cache: pool " << pool << " is not a live private pool";
  DPT_CHECK(pool != capture_) << "block cache: pool " << pool << " released while captured into";
  Pool& p = it->second;
  Pool& shared = pools_.at(kShared);
  p.released = true;
  p.free.clear([&](void* ptr, size_t bytes) {
    p.bytes -= bytes;
    shared.bytes += bytes;
    counters_.pool_bytes -= bytes;
    shared.free.put(ptr, bytes);
  });
  erase_if_empty(pool);
}

size_t BlockCache::pool_bytes(PoolId pool) const {
  auto it = pools_.find(pool);
  return it == pools_.end() ? 0 : it->second.bytes;
}

void BlockCache::erase_if_empty(PoolId pool) {
  auto it = pools_.find(pool);
  if (pool != kShared && it->second.released && it->second.live == 0) pools_.erase(it);
}

}  // namespace dpt
