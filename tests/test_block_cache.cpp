// The caching allocator's bookkeeping (core/block_cache.h), which is device-independent:
// fake addresses stand in for cudaMalloc's. The rules for CUDA graphs' private pools are
// checked twice: step by step on small cases, and over long random sequences of
// allocations, frees, captures and releases against an independent record of which graph
// has touched each block (a block a live graph touched must never reach eager code).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/block_cache.h"
#include "core/error.h"
#include "error_of.h"

using namespace dpt;
using dpt::testing::error_of;

namespace {

// cudaMalloc's stand-in: distinct, never reused addresses.
struct FakeDevice {
  uintptr_t next = 0x10000;
  void* malloc(size_t bytes) {
    void* p = reinterpret_cast<void*>(next);
    next += bytes + 0x1000;
    return p;
  }
};

void* allocate(BlockCache& cache, FakeDevice& device, size_t bytes) {
  if (void* p = cache.take(bytes)) return p;
  void* p = device.malloc(bytes);
  cache.add(p, bytes);
  return p;
}

}  // namespace

TEST(FreeList, TakesTheSmallestFitWastingAtMostAnEighth) {
  FreeList list;
  int a, b, c;
  list.put(&a, 1000);
  list.put(&b, 1100);
  list.put(&c, 4096);
  size_t got = 0;
  EXPECT_EQ(list.take(1200, &got), nullptr);  // 4096 would waste more than 1200 / 8
  EXPECT_EQ(list.take(980, &got), &a);
  EXPECT_EQ(got, 1000u);
  EXPECT_EQ(list.take(980, &got), &b);  // 1100 <= 980 + 122
  EXPECT_EQ(list.take(4000, &got), &c);
  EXPECT_TRUE(list.empty());
}

TEST(BlockCache, SharedBlocksAreReusedAndCounted) {
  BlockCache cache;
  FakeDevice device;
  void* a = allocate(cache, device, 512);
  void* b = allocate(cache, device, 1024);
  EXPECT_EQ(cache.counters().allocated_bytes, 1536u);
  EXPECT_EQ(cache.counters().reserved_bytes, 1536u);
  ASSERT_TRUE(cache.release(a));
  EXPECT_FALSE(cache.release(a));  // twice
  EXPECT_EQ(cache.block_bytes(b), 1024u);
  EXPECT_EQ(cache.block_bytes(a), 0u);
  EXPECT_EQ(allocate(cache, device, 512), a);
  EXPECT_EQ(cache.counters().cache_hits, 1u);
  EXPECT_EQ(cache.counters().peak_allocated_bytes, 1536u);
  cache.release(a);
  cache.release(b);
  std::vector<void*> freed;
  cache.trim([&](void* p, size_t) { freed.push_back(p); });
  EXPECT_EQ(freed.size(), 2u);
  EXPECT_EQ(cache.counters().reserved_bytes, 0u);
}

// What allocator_empty_cache asks before it synchronises the device and trims. It used to
// compare reserved with allocated + pool bytes, which counts a graph's live blocks twice:
// a free shared block of the same size as the pool's live ones went unnoticed.
TEST(BlockCache, SharedCachedSeesOnlyTheSharedPoolsFreeBlocks) {
  BlockCache cache;
  FakeDevice device;
  EXPECT_FALSE(cache.shared_cached());
  void* eager = allocate(cache, device, 512);
  EXPECT_FALSE(cache.shared_cached());  // live
  auto pool = cache.pool_create();
  cache.capture_begin(pool);
  void* captured = allocate(cache, device, 512);  // live in the pool (a graph's output)
  void* scratch = allocate(cache, device, 1024);
  cache.release(scratch);  // free, but the pool's
  cache.capture_end();
  EXPECT_FALSE(cache.shared_cached());
  cache.release(eager);
  ASSERT_TRUE(cache.shared_cached());
  std::vector<void*> freed;
  cache.trim([&](void* p, size_t) { freed.push_back(p); });
  EXPECT_EQ(freed, std::vector<void*>{eager});
  EXPECT_FALSE(cache.shared_cached());
  cache.release(captured);  // back to its live pool, not to the shared one
  EXPECT_FALSE(cache.shared_cached());
  cache.pool_release(pool);  // the pool's free blocks join the shared pool
  EXPECT_TRUE(cache.shared_cached());
}

TEST(BlockCache, CaptureAllocatesFromItsPoolAndReusesItsOwnFrees) {
  BlockCache cache;
  FakeDevice device;
  void* eager = allocate(cache, device, 512);
  cache.release(eager);  // a free shared block of the right size ...
  auto pool = cache.pool_create();
  cache.capture_begin(pool);
  void* first = allocate(cache, device, 512);
  EXPECT_NE(first, eager);  // ... is not what a capture gets
  cache.release(first);
  EXPECT_EQ(allocate(cache, device, 512), first);  // its own free, later in the same capture
  cache.capture_end();
  EXPECT_EQ(cache.pool_bytes(pool), 512u);
  EXPECT_EQ(cache.counters().pool_bytes, 512u);
  // After the capture: eager code gets the shared block, never the pool's.
  EXPECT_EQ(allocate(cache, device, 512), eager);
  void* fresh = allocate(cache, device, 512);
  EXPECT_NE(fresh, first);
}

TEST(BlockCache, SharedBlockFreedDuringCaptureStaysWithTheGraph) {
  BlockCache cache;
  FakeDevice device;
  void* before = allocate(cache, device, 2048);  // e.g. an activation the warm-up left alive
  auto pool = cache.pool_create();
  cache.capture_begin(pool);
  cache.release(before);  // the captured step may have read it
  cache.capture_end();
  EXPECT_EQ(cache.pool_bytes(pool), 2048u);
  EXPECT_NE(allocate(cache, device, 2048), before);
  // Released with the graph, it serves eager code again.
  cache.pool_release(pool);
  EXPECT_EQ(cache.pool_bytes(pool), 0u);
  EXPECT_EQ(cache.counters().pool_bytes, 0u);
  EXPECT_EQ(allocate(cache, device, 2048), before);
}

TEST(BlockCache, OutputsLiveAfterReleaseReturnWhenFreed) {
  BlockCache cache;
  FakeDevice device;
  auto pool = cache.pool_create();
  cache.capture_begin(pool);
  void* output = allocate(cache, device, 512);  // the captured step's loss, held by the caller
  cache.capture_end();
  cache.release(output);  // graph alive: back to its pool
  EXPECT_NE(allocate(cache, device, 512), output);
  cache.capture_begin(pool);  // a pool can be captured into again while its graph lives
  EXPECT_EQ(allocate(cache, device, 512), output);
  cache.capture_end();
  cache.pool_release(pool);
  EXPECT_EQ(cache.pool_bytes(pool), 512u);  // still live
  cache.release(output);
  EXPECT_EQ(cache.pool_bytes(pool), 0u);
  EXPECT_EQ(cache.take(512), output);
}

TEST(BlockCache, MisuseIsAnError) {
  BlockCache cache;
  auto a = cache.pool_create(), b = cache.pool_create();
  cache.capture_begin(a);
  EXPECT_NE(error_of([&] { cache.capture_begin(b); }).find("one capture per device"), std::string::npos);
  EXPECT_NE(error_of([&] { cache.pool_release(a); }).find("while captured into"), std::string::npos);
  cache.capture_end();
  cache.pool_release(a);
  EXPECT_NE(error_of([&] { cache.capture_begin(a); }).find("not a live private pool"), std::string::npos);
  EXPECT_NE(error_of([&] { cache.capture_begin(BlockCache::kShared); }).find("not a live private pool"),
            std::string::npos);
}

// Random sequences against an independent record: for every block, the pools (graphs)
// that have touched it — allocated it or freed it during their capture. Eager code must
// never get a block a live graph touched, a capture never one another live graph touched,
// and no block is handed out twice; the byte counters must equal sums over the record.
TEST(BlockCache, RandomSequencesKeepGraphMemoryFromEagerCode) {
  std::mt19937 rng(7);
  const size_t sizes[] = {512, 1024, 4096, 4608};
  int released_reused = 0;
  for (int round = 0; round < 50; ++round) {
    BlockCache cache;
    FakeDevice device;
    std::map<void*, size_t> size_of;              // every block ever made
    std::map<void*, std::set<uint64_t>> touched;  // block -> graphs that touched it
    std::set<void*> live;
    std::set<uint64_t> live_pools, released_pools;
    uint64_t capturing = 0;
    auto check_allocation = [&](void* p) {
      ASSERT_EQ(live.count(p), 0u) << "handed out twice";
      for (uint64_t g : touched[p])
        if (live_pools.count(g) && g != capturing)
          FAIL() << "graph " << g << "'s block given to another user";
      for (uint64_t g : touched[p])
        if (released_pools.count(g)) ++released_reused;
      live.insert(p);
      if (capturing) touched[p].insert(capturing);
    };
    for (int op = 0; op < 400; ++op) {
      int kind = static_cast<int>(rng() % 10);
      if (kind < 5) {
        size_t bytes = sizes[rng() % 4];
        void* p = cache.take(bytes);
        if (!p) {
          p = device.malloc(bytes);
          cache.add(p, bytes);
          size_of[p] = bytes;
        }
        check_allocation(p);
      } else if (kind < 8 && !live.empty()) {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        void* p = *it;
        // A block of one live graph freed in another's capture (a tensor passed between
        // graphs) goes back to its own pool: such graphs must replay in capture order.
        bool other_graph = false;
        for (uint64_t g : touched[p]) other_graph |= capturing && g != capturing && live_pools.count(g);
        if (other_graph) continue;
        live.erase(it);
        ASSERT_TRUE(cache.release(p));
        if (capturing) touched[p].insert(capturing);
      } else if (kind == 8) {
        if (capturing) {
          cache.capture_end();
          capturing = 0;
        } else if (live_pools.size() < 3) {
          capturing = cache.pool_create();
          live_pools.insert(capturing);
          cache.capture_begin(capturing);
        } else {
          capturing = *live_pools.begin();  // capture into a live graph's pool again
          cache.capture_begin(capturing);
        }
      } else if (kind == 9 && !live_pools.empty()) {
        uint64_t g = *live_pools.rbegin();
        if (g == capturing) continue;
        cache.pool_release(g);
        live_pools.erase(g);
        released_pools.insert(g);
      }
      size_t allocated = 0, reserved = 0;
      for (void* p : live) allocated += size_of[p];
      for (auto& [p, bytes] : size_of) reserved += bytes;
      ASSERT_EQ(cache.counters().allocated_bytes, allocated);
      ASSERT_EQ(cache.counters().reserved_bytes, reserved);
      size_t in_pools = 0;
      for (uint64_t g : live_pools) in_pools += cache.pool_bytes(g);
      for (uint64_t g : released_pools) in_pools += cache.pool_bytes(g);
      ASSERT_EQ(cache.counters().pool_bytes, in_pools);
    }
  }
  EXPECT_GT(released_reused, 0) << "memory of released graphs was never reused";
}
