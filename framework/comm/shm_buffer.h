// Buffers that all-reduce in place without copies, for groups whose ranks share one machine.
//
// Why: DDP all-reduces its gradient buckets every step. Through MPI each byte is copied
// between the processes and reduced over several rounds, each needing both ranks to poll;
// with one core per rank that polling and copying is taken from backward. When the bucket
// itself lives in memory every rank maps, an all-reduce is one pass: rank r sums chunk r of
// every rank's buffer (in rank order, so all ranks get bit-identical results) and writes the
// sum into every rank's buffer. Each rank reads and writes its share once; nothing is copied
// in or out. ProcessGroup::collective_buffer() hands these out; all_reduce recognises them.
//
// Op s on a buffer (numbered per buffer, in call order): each rank publishes arrived = s and
// the byte range it reduces once its data is in place; when every rank has arrived, each
// reduces its chunk into every buffer and publishes reduced = s; the op is complete on a rank
// once every rank has reduced. Others write a rank's buffer only between its arrival and its
// completion, when its owner leaves it alone (the contract of all_reduce); a rank arrives at
// s+1 only after every rank reduced s, so no rank still reads s's data then.
// reduce_scatter and all_gather (in place) follow the same steps, but each rank writes only
// its own memory: the reduction of its chunk_of(count) into its `out`, or the other ranks'
// chunks, read from their buffers, into its own.
//
// Small all-reduces of a group on one machine (up to MpiProcessGroup::kShmAllReduceBytes)
// use one buffer of two halves as a segment: below ~64 KB an all-reduce is all latency, and
// Open MPI's MPI_Iallreduce costs 2-3x its blocking MPI_Allreduce there. Each rank copies its
// input into the half of op s's parity and arrives; once all have, each reduces every rank's
// copy into its output itself (reduce_range), with no second meeting. A rank starts op s only
// after its op s-1 completed, that is after every rank arrived at s-1 and so finished op s-2,
// the last reader of that half: no rank overwrites what another still reads.
//
// The memory is one block of POSIX shared memory that every rank maps, not an MPI window:
// unmapping is local, so groups and buffers may be freed in any order on each rank, without
// a collective MPI_Win_free that could deadlock.
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

namespace dpt::dist {

// Whether every rank of comm runs on this machine. Collective over comm.
bool all_on_this_node(MPI_Comm comm);

inline size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

class ShmBuffer {
 public:
  // Collective over comm (its calling thread; no collective in flight on it). requires: 2 or
  // more ranks, all on this machine. nullptr on every rank alike when shared memory cannot
  // be had (no /dev/shm, or too little room: the bytes are reserved up front, so a full
  // /dev/shm fails here rather than with SIGBUS on first touch) or some rank passes
  // want = false (the caller then uses private memory). The memory's name is unlinked once
  // every rank has mapped it, so nothing outlives the processes.
  static std::shared_ptr<ShmBuffer> create(MPI_Comm comm, size_t bytes, bool want);
  ~ShmBuffer();  // munmap: local
  ShmBuffer(const ShmBuffer&) = delete;
  ShmBuffer& operator=(const ShmBuffer&) = delete;

  char* data() const { return region(rank_); }  // this rank's buffer, zeroed at first
  size_t bytes() const { return bytes_; }
  bool contains(const void* p, size_t n) const {
    const char* c = static_cast<const char*>(p);
    return c >= data() && c + n <= data() + bytes_;
  }
  // The control words: tasks on one buffer run one at a time (CommTask::scratch).
  const char* control_begin() const { return base_; }
  const char* control_end() const { return base_ + header_bytes_; }

  // By the poll token's holder, in call order: the next op's number (1, 2, ...).
  uint64_t next_sequence() { return ++sequence_; }
  // Publishes that this rank's bytes [offset, offset + bytes) are ready for op seq.
  void arrive(uint64_t seq, size_t offset, size_t bytes);
  // Whether every rank has arrived at op seq. With same_range, throws Error when a rank
  // reduces another byte range than this one (the buffers must be used alike on every rank).
  bool all_arrived(uint64_t seq, const Work& task, bool same_range = true) const;
  // Reduces this rank's chunk of the op's range over every rank's buffer (rank order; avg
  // divides by the group size as the MPI path does) into every buffer, then publishes it.
  // requires all_arrived.
  void reduce_share(uint64_t seq, size_t offset, int64_t count, DType dtype, ReduceOp op);
  // reduce_scatter: this rank's chunk_of(count, size, rank) of the reduction of the op's
  // range over every rank's buffer (rank order, as reduce_share) into `out`, then publishes
  // it. requires all_arrived.
  void reduce_chunk(uint64_t seq, size_t offset, int64_t count, DType dtype, ReduceOp op, void* out);
  // all_gather in place: copies every other rank r's chunk_of(count, size, r) of the op's
  // range from its buffer into this rank's, then publishes it. requires all_arrived.
  void gather_chunks(uint64_t seq, size_t offset, int64_t count, DType dtype);
  // Elements [begin, end) of the op's range, reduced over every rank's buffer (as
  // reduce_share), into dest, or with no dest into every buffer; then publishes it.
  void reduce_range(uint64_t seq, size_t offset, int64_t begin, int64_t end, DType dtype, ReduceOp op,
                    void* dest);
  // Whether every rank has finished its part of op seq (reduce_share, reduce_chunk or
  // gather_chunks): only then may a rank change its buffer again.
  bool all_reduced(uint64_t seq) const;

 private:
  struct RankControl;
  ShmBuffer(char* base, size_t mapped, size_t bytes, size_t header_bytes, size_t stride, int size, int rank);
  RankControl& control(int rank) const;
  char* region(int rank) const { return base_ + header_bytes_ + stride_ * rank; }

  char* base_;     // the mapping, zeroed at first: the control words, then each rank's buffer
  size_t mapped_;  // its bytes
  size_t bytes_, header_bytes_, stride_;
  int size_, rank_;
  uint64_t sequence_ = 0;
};

}  // namespace dpt::dist
