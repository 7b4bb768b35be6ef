// ProcessGroup: a set of ranks and the collectives among them. Collectives are
// asynchronous: each returns a Work at once and starts in call order; the group's
// communication thread progresses it in the background, so a gradient all-reduce
// overlaps the rest of backward.
// Backends: MPI for CPU tensors (mpi_process_group.cpp); NCCL for CUDA tensors comes
// with the CUDA backend behind this same interface.
#pragma once

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
};
using WorkPtr = std::shared_ptr<Work>;

// Element range [begin, end) of rank r when n elements are split over `size` ranks as
// evenly as possible (the first n % size ranks get one more). Used by reduce_scatter and
// all_gather, so a size that does not divide by the group size is fine.
struct Chunk {
  int64_t begin, end;
};
Chunk chunk_of(int64_t n, int size, int rank);

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
  // wait() returns. Ranks are group ranks. Collectives start in call order and complete in
  // call order: when wait() returns, every earlier Work of the group is complete too.
  // Ones on disjoint tensors may be in flight together; one that touches a tensor an
  // earlier one writes starts after it, so all_reduce(t) then broadcast(t) needs no wait.
  virtual WorkPtr all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) = 0;  // in place
  virtual WorkPtr broadcast(const Tensor& t, int root) = 0;                      // in place
  // out (n elements, the same n everywhere) = concatenation over ranks r of each rank's
  // `in`, which holds chunk_of(n, size, r).
  virtual WorkPtr all_gather(const Tensor& out, const Tensor& in) = 0;
  // out = chunk_of(n, size, rank) of the reduction of every rank's `in` (n elements).
  virtual WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum) = 0;
  virtual WorkPtr barrier() = 0;
  virtual WorkPtr send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual WorkPtr recv(const Tensor& t, int src, int tag = 0) = 0;

  // A zeroed 1-D tensor that this group may all-reduce faster than other memory (in place,
  // without copies, when the ranks share a machine: shm_buffer.h), e.g. DDP's gradient
  // buckets. Collective: every rank calls it in the same order with the same numel and
  // dtype, with no collective of this group in flight; and every rank must all-reduce the
  // same parts of it. Default: ordinary memory.
  virtual Tensor collective_buffer(int64_t numel, DType dtype, Device device) {
    return Tensor::zeros({numel}, dtype, device);
  }

 protected:
  ProcessGroup(int rank, std::vector<int> world_ranks, std::string name)
      : rank_(rank), world_ranks_(std::move(world_ranks)), name_(std::move(name)) {}

 private:
  int rank_;
  std::vector<int> world_ranks_;
  std::string name_;
};
using GroupPtr = std::shared_ptr<ProcessGroup>;

}  // namespace dpt::dist
