// Small all-reduces through shared memory, for groups whose ranks all share one machine.
//
// Why: below ~64 KB an all-reduce is all latency, and Open MPI's nonblocking
// MPI_Iallreduce costs 2-3x its blocking MPI_Allreduce there (libnbc's schedule), so no
// asynchronous API on top of it can match the blocking call. Here each rank copies its
// input into its own slot of a shared segment and publishes a sequence number; once every
// rank's number has arrived, each rank reduces all slots itself, in rank order, so every
// rank gets bit-identical results (and the same results MPI's sum over 2 ranks gives).
// Nothing here blocks: arrive() then poll complete(), which fits the group's poll token
// (comm_thread.h) like any MPI request.
//
// Slots are double-buffered by sequence parity. A rank starts op s only after its op s-1
// completed (the tasks declare the segment as scratch, which serialises them), and op s-1
// completed only when every rank had arrived at s-1, that is had finished op s-2 — the last
// reader of the buffer op s writes. So no rank overwrites data another still reads.
//
// The segment is a SharedMapping (shm_map.h).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "comm/process_group.h"
#include "comm/shm_map.h"

namespace dpt::dist {

class ShmSegment {
 public:
  // Collective over `comm` (its calling thread; no collective may be in flight on it).
  // requires: comm has 2 or more ranks, all on this machine (all_on_this_node).
  // Returns nullptr, on every rank alike, when shared memory cannot be had on some rank
  // (then MPI does all).
  // capacity: the largest message in bytes (DPT_SHM_ALLREDUCE_BYTES overrides; 0 disables).
  static std::unique_ptr<ShmSegment> create(MPI_Comm comm, size_t capacity);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  size_t capacity() const { return capacity_; }
  int size() const { return size_; }
  // The next op's sequence number (1, 2, ...); by the poll token's holder, in call order.
  uint64_t next_sequence() { return ++sequence_; }
  // Copies `bytes` into this rank's slot for op `seq` and publishes the arrival.
  void arrive(uint64_t seq, const void* data, size_t bytes);
  // Whether every rank has arrived at op `seq`.
  bool all_arrived(uint64_t seq) const;
  // out[i] = slot_0[i] op slot_1[i] op ... (rank order) for op `seq`; requires all_arrived.
  void reduce(uint64_t seq, void* out, int64_t count, DType dtype, ReduceOp op) const;
  // The bytes the tasks use, for the poll token's conflict check.
  const char* begin() const { return memory_->data(); }
  const char* end() const { return memory_->data() + memory_->bytes(); }

 private:
  ShmSegment(std::unique_ptr<SharedMapping> memory, size_t capacity, int size, int rank);
  std::atomic<uint64_t>& arrived(int rank) const;
  const char* slot(int rank, uint64_t seq) const;

  std::unique_ptr<SharedMapping> memory_;
  size_t capacity_, slot_stride_;
  int size_, rank_;
  uint64_t sequence_ = 0;
};

}  // namespace dpt::dist
