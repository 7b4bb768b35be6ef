// One call as the process group's front end describes it (its signature, its text for
// messages, its number) and as the MPI backend runs it: started as a nonblocking MPI call,
// or through shared memory, or in the stages of the hierarchical all-reduce, by whichever
// thread holds the group's poll token (comm_thread.h). CUDA calls are described by the same
// struct and run by the NCCL backend instead.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/control_channel.h"
#include "comm/flight_recorder.h"
#include "comm/hierarchical.h"

namespace dpt::dist {

class ShmBuffer;

enum class OpKind {
  all_reduce,
  broadcast,
  all_gather,
  reduce_scatter,
  reduce,
  gather,
  scatter,
  all_to_all,
  barrier,
  send,
  recv
};

const char* op_kind_name(OpKind kind);
bool is_reduction(OpKind kind);
bool is_rooted(OpKind kind);

// One collective: what to run, on which buffers; the tensors stay alive until it completes.
struct MpiOp final : public CommTask {
  OpKind kind = OpKind::barrier;
  ReduceOp reduce = ReduceOp::sum;
  MPI_Comm comm = MPI_COMM_NULL;
  const std::string* group_name = nullptr;  // the group outlives its pending work
  int group_size = 1, rank = 0;
  int peer = 0, tag = 0;  // the root of broadcast, reduce, gather, scatter; send's dst; recv's src
  Tensor out, in;         // out: the in-place tensor of all_reduce, broadcast, reduce, send, recv
  DType dtype = DType::f32;
  // Elements: of `out`, of all_gather's out, of reduce_scatter's in, of gather's in and
  // scatter's out (per rank); all_to_all: unused (each rank's own).
  int64_t n = 0;
  std::vector<int> counts, displs;        // all_gather, reduce_scatter: per-rank chunks; all_to_all: of out
  std::vector<int> in_counts, in_displs;  // all_to_all: of in
  // reduce_scatter through MPI: every rank's copy of this rank's chunk, rank after rank, and
  // how many elements come from each rank and where they go.
  Tensor received;
  std::vector<int> received_counts, received_displs;
  bool in_place = false;      // all_gather's `in` is its own chunk of `out`
  // A small all_reduce: copied into the group's segment (MpiProcessGroup::kShmAllReduceBytes).
  ShmBuffer* shm = nullptr;
  uint64_t shm_seq = 0;  // its op number in `shm` or `shared`, once started
  // all_reduce and all_gather in place: `out`, reduce_scatter: `in` lies in this buffer.
  std::shared_ptr<ShmBuffer> shared;
  size_t shared_offset = 0;     // of that tensor in it (in shm: of the copy), in bytes
  bool shared_reduced = false;  // this rank's share is done
  // all_reduce across hosts, in stages (hierarchical.h); null for every other collective.
  std::unique_ptr<HierarchicalAllReduce> hierarchical;
  ControlChannel* control = nullptr;  // the group's, which outlives its pending work
  int64_t seq = 0;                    // the collective's number in its group; 0 for send/recv
  FlightRing* flight = nullptr;       // the group's, for collectives (not send/recv)

  CallSignature signature() const;
  std::string describe() const override;
  std::string timeout_detail() const override;

 protected:
  MPI_Request start() override;
  // reduce_scatter through MPI: out = the ranks' copies of this rank's chunk combined in rank
  // order (avg: summed; finish divides).
  void combine_received();
  bool progress() override;
  void finish(const MPI_Status& status) override;
};

}  // namespace dpt::dist
