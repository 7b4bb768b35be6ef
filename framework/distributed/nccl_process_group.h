// The NCCL backend of ProcessGroup, for CUDA tensors (built only with DPT_WITH_CUDA).
// Users never make one: an MPI group hands its CUDA tensors to the NCCL group it makes on
// first use (mpi_process_group.cpp), so DDP, sync batch-norm and the Trainer run unchanged
// on GPUs — the PyTorch "cpu:gloo,cuda:nccl" arrangement.
//
// Streams: each group owns a communication stream on its device. A collective waits (on
// the GPU, through an event) for everything already queued on the device's compute stream,
// runs on the communication stream, and records a completion event. Work::wait() makes the
// compute stream wait for that event and returns at once, as torch's NCCL wait() does:
// every kernel queued afterwards sees the result, and the host never stalls on the GPU.
// Barrier is the exception: its wait() blocks the host until all ranks arrived.
//
// Tensors a collective uses stay alive until its event completes (the group holds them),
// so the caching allocator cannot hand their memory to a kernel while NCCL still reads it.
//
// CUDA graphs (backend/cuda/graph.h): a collective called during a capture is recorded into
// the graph, the communication stream forked from the compute stream and joined back by
// Work::wait() through the same events; such a Work is never queried (is_completed() is
// false) and a barrier cannot be waited for inside a capture.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/stream.h"
#include "distributed/process_group.h"

namespace dpt::dist {

class NcclWork;

class NcclProcessGroup final : public ProcessGroup {
 public:
  // Collective over `bootstrap` (an MPI communicator of the same ranks, not used by any
  // in-flight collective): its rank 0 makes the ncclUniqueId and broadcasts it over MPI.
  static std::shared_ptr<NcclProcessGroup> create(MPI_Comm bootstrap, std::vector<int> world_ranks,
                                                  std::string name, int device);
  // Collective over this group (ncclCommSplit): ranks with equal colour >= 0 form a group,
  // ordered by (key, rank); colour < 0 returns nullptr. `world_ranks` and `name` are the
  // new group's, as its MPI twin computed them.
  std::shared_ptr<NcclProcessGroup> split(int color, int key, std::vector<int> world_ranks, std::string name);
  ~NcclProcessGroup() override;

  int device() const { return device_; }

  // As ProcessGroup; tensors must be contiguous CUDA tensors on device() of dtype f32,
  // bf16, f16 or i64 (avg: floating dtypes only). all_gather and reduce_scatter take sizes
  // that do not divide by the group size. send/recv take tag 0 only (NCCL has no tags).
  // reduce is NCCL's; gather, scatter and all_to_all are one ncclSend/ncclRecv per peer in
  // one NCCL group (a single launch), and a copy on the stream for the rank's own block.
  WorkPtr all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) override;
  WorkPtr broadcast(const Tensor& t, int root) override;
  WorkPtr all_gather(const Tensor& out, const Tensor& in) override;
  WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum) override;
  WorkPtr reduce(const Tensor& t, int root, ReduceOp op = ReduceOp::sum) override;
  WorkPtr gather(const Tensor& out, const Tensor& in, int root) override;
  WorkPtr scatter(const Tensor& out, const Tensor& in, int root) override;
  WorkPtr all_to_all(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_splits = {},
                     const std::vector<int64_t>& in_splits = {}) override;
  WorkPtr barrier() override;
  WorkPtr send(const Tensor& t, int dst, int tag = 0) override;
  WorkPtr recv(const Tensor& t, int src, int tag = 0) override;

 private:
  NcclProcessGroup(ncclComm_t comm, int rank, std::vector<int> world_ranks, std::string name, int device);

  void check_tensor(const char* op, const Tensor& t, const char* what) const;
  // Inside begin()/end(), on the communication stream: sends in_counts[r] elements of `in`
  // from in_offsets[r] to each peer r and receives out_counts[r] into `out` at
  // out_offsets[r], in one NCCL group; the rank's own block (in_counts[rank()] elements) is a
  // device copy. Zero counts move nothing; a tensor with only zero counts is not touched
  // (it may be undefined).
  void exchange(const Tensor& out, const std::vector<int64_t>& out_counts,
                const std::vector<int64_t>& out_offsets, const Tensor& in,
                const std::vector<int64_t>& in_counts, const std::vector<int64_t>& in_offsets);
  // Orders the communication stream after the compute stream's queued work.
  void begin();
  // Records the completion event, keeps `tensors` alive until it completes.
  std::shared_ptr<NcclWork> end(std::vector<Tensor> tensors, bool host_wait);
  void reap_completed();
  void check_async_error() const;

  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  cuda::Stream stream_;
  cuda::Event compute_ready_;
  Tensor scratch_;                                   // barrier's one element
  std::deque<std::shared_ptr<NcclWork>> in_flight_;  // in call order
};

}  // namespace dpt::dist
