// ProcessGroup: a set of ranks and the collectives among them. Collectives are
// asynchronous: each returns a Work at once and progresses in the background, so a gradient
// all-reduce overlaps the rest of backward. One implementation, mpi_process_group.h: MPI
// and shared memory for CPU tensors, NCCL for CUDA tensors.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dpt::dist {

enum class ReduceOp { sum, avg, min, max };
const char* reduce_op_name(ReduceOp op);

// The handle of one collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective has completed on this rank; rethrows its error.
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
  // is_completed(), after progressing the collective on the calling thread where the
  // backend can: for one collective polled from inside another (hierarchical.h's stages).
  virtual bool test() { return is_completed(); }
  // For messages: "all_reduce(sum) of 1000 f32 on world (collective #3)"; "" where the
  // backend does not say.
  virtual std::string describe() const { return ""; }
};
using WorkPtr = std::shared_ptr<Work>;

// Element range [begin, end) of rank r when n elements are split over `size` ranks as
// evenly as possible (the first n % size ranks get one more). Used by reduce_scatter and
// all_gather, so a size that does not divide by the group size is fine.
struct Chunk {
  int64_t begin, end;
};
Chunk chunk_of(int64_t n, int size, int rank);

// Collectives a rank called and their bytes: how many round trips a training step makes.
struct CollectiveCounts {
  int64_t collectives = 0;
  int64_t bytes = 0;  // per collective, the largest tensor it reads or writes on this rank
  CollectiveCounts& operator+=(const CollectiveCounts& other);
  CollectiveCounts operator-(const CollectiveCounts& other) const;
};

// One message of batch_send_recv: a send of `tensor` to group rank `peer`, or a receive into it.
struct P2POp {
  bool send = true;
  Tensor tensor;
  int peer = 0;
  int tag = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  int rank() const { return rank_; }  // within this group
  int size() const { return static_cast<int>(world_ranks_.size()); }
  // World ranks of the members, indexed by group rank.
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  // For messages: "world", "group[0,2]", "mesh.dp[1,3]".
  const std::string& name() const { return name_; }

  // Every collective below requires contiguous tensors of the same dtype and element
  // count on every member (except as noted); tensors must stay alive, untouched, until
  // wait() returns. Ranks (root, dst, src, and the order of blocks) are group ranks. A
  // collective's tensors must not overlap each other (except all_gather's in place).
  // Collectives start and complete in call order: when wait() returns, every earlier Work of
  // the group is complete too. Ones on disjoint tensors may be in flight together; one that
  // touches a tensor an earlier one writes starts after it (all_reduce(t) then broadcast(t)
  // needs no wait).
  virtual WorkPtr all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) = 0;  // in place
  virtual WorkPtr broadcast(const Tensor& t, int root) = 0;                      // in place
  // out (n elements, the same n everywhere) = concatenation over ranks r of each rank's
  // `in`, which holds chunk_of(n, size, r).
  virtual WorkPtr all_gather(const Tensor& out, const Tensor& in) = 0;
  // out = chunk_of(n, size, rank) of the reduction of every rank's `in` (n elements).
  virtual WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum) = 0;
  // In place, n elements everywhere: on root, t = the reduction over ranks of every rank's
  // t; on the other ranks t is only read.
  virtual WorkPtr reduce(const Tensor& t, int root, ReduceOp op = ReduceOp::sum) = 0;
  // Every rank's `in` holds m elements (the same m everywhere). On root, `out` holds
  // size() * m and receives rank r's `in` at elements [r * m, (r + 1) * m) (all_gather's
  // layout, to one rank). `out` is used on root only: other ranks may pass Tensor().
  virtual WorkPtr gather(const Tensor& out, const Tensor& in, int root) = 0;
  // The converse: on root, `in` holds size() * m elements; every rank's `out` (m elements,
  // the same m everywhere) receives elements [rank * m, (rank + 1) * m) of root's `in`.
  // `in` is used on root only: other ranks may pass Tensor().
  virtual WorkPtr scatter(const Tensor& out, const Tensor& in, int root) = 0;
  // Rank i sends in_splits[j] consecutive elements of its `in` to rank j, blocks in rank
  // order; they land in rank j's `out` at the offset sum(out_splits[0..i)) (MPI_Alltoallv,
  // torch's all_to_all_single). Empty splits mean equal ones: numel / size() each, which
  // must divide. requires: one split per rank, sum(in_splits) == in.numel(),
  // sum(out_splits) == out.numel(), in_splits[rank] == out_splits[rank] (the block a rank
  // keeps), and rank j's out_splits[i] == rank i's in_splits[j]: only that last one needs
  // the other ranks, and debug: collectives checks it before anything is sent.
  virtual WorkPtr all_to_all(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_splits = {},
                             const std::vector<int64_t>& in_splits = {}) = 0;
  virtual WorkPtr barrier() = 0;
  virtual WorkPtr send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual WorkPtr recv(const Tensor& t, int src, int tag = 0) = 0;
  // Starts the messages together (as torch.distributed.batch_isend_irecv) and returns their
  // Works, in order. Same requirements as send() and recv(). On NCCL they form one group
  // (ncclGroupStart/End), so a send and a receive that two ranks queue in opposite orders
  // cannot wait on each other: in a 1F1B pipeline step stage 0 sends activation m + 1 while
  // it receives gradient m, and stage 1 the converse.
  virtual std::vector<WorkPtr> batch_send_recv(const std::vector<P2POp>& ops) = 0;

  // A zeroed 1-D tensor that this group may all-reduce faster than other memory (in place,
  // without copies, when the ranks share a machine: shm_buffer.h), e.g. DDP's gradient
  // buckets. Collective: every rank calls it in the same order with the same numel and
  // dtype, with no collective of this group in flight; and every rank must all-reduce the
  // same parts of it. Default: ordinary memory.
  virtual Tensor collective_buffer(int64_t numel, DType dtype, Device device) {
    return Tensor::zeros({numel}, dtype, device);
  }

  // The collectives (every one above but send and recv) this rank has called on this group
  // since it was made, on any device, and their bytes. Thread-safe.
  CollectiveCounts counts() const { return {collectives_.load(), bytes_.load()}; }

 protected:
  ProcessGroup(int rank, std::vector<int> world_ranks, std::string name)
      : rank_(rank), world_ranks_(std::move(world_ranks)), name_(std::move(name)) {}
  // An implementation calls this once per collective call it accepts, with the call's
  // tensors (undefined ones count 0 bytes).
  void count_collective(const Tensor& a = Tensor(), const Tensor& b = Tensor());

 private:
  int rank_;
  std::vector<int> world_ranks_;
  std::string name_;
  std::atomic<int64_t> collectives_{0}, bytes_{0};
};
using GroupPtr = std::shared_ptr<ProcessGroup>;

// all_to_all: the element count and offset of each rank's block of `out` and of `in`.
struct AllToAllLayout {
  std::vector<int64_t> out_counts, out_offsets, in_counts, in_offsets;
};
// ": not complete after 5 s (distributed.timeout_s, DPT_DIST_TIMEOUT_S)": how a collective
// that timed out is reported, after its description, on every backend.
std::string timeout_text(std::chrono::milliseconds timeout);
std::string seconds_text(std::chrono::duration<double> d);  // "5 s", "1.5 s"

}  // namespace dpt::dist
