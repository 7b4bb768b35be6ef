// The NCCL backend, for CUDA tensors (built only with DPT_WITH_CUDA): it only moves bytes.
// A process group hands its CUDA tensors to the NcclBackend it makes on first use, after its
// front end has checked, numbered, recorded and (debug mode) compared the call; the process
// watchdog holds it to the timeout. So DDP, sync batch-norm and the Trainer run unchanged on
// GPUs — the PyTorch "cpu:gloo,cuda:nccl" arrangement.
//
// Streams: each backend owns a communication stream on its device. A collective waits (on
// the GPU, through an event) for everything already queued on the device's compute stream,
// runs on the communication stream, and records a completion event. Work::wait() makes the
// compute stream wait for that event and returns at once, as torch's NCCL wait() does:
// every kernel queued afterwards sees the result, and the host never stalls on the GPU.
//
// Tensors a collective uses stay alive until its event completes (the backend holds them),
// so the caching allocator cannot hand their memory to a kernel while NCCL still reads it.
//
// CUDA graphs (backend/cuda/graph.h): a collective called during a capture is recorded into
// the graph, the communication stream forked from the compute stream and joined back by
// Work::wait() through the same events; such a Work is never queried (is_completed() is
// false), so it is not watched.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/stream.h"
#include "comm/device_collectives.h"

namespace dpt::dist {

class NcclWork;
struct NcclComm;

class NcclBackend final : public DeviceCollectives {
 public:
  // Collective over `bootstrap` (an MPI communicator of the same ranks, not used by any
  // in-flight collective): its rank 0 makes the ncclUniqueId and broadcasts it over MPI.
  // `name`: the group's, for messages. Registered as the CUDA maker of device_collectives.h.
  static std::shared_ptr<DeviceCollectives> create(MPI_Comm bootstrap, const std::string& name, int device);
  ~NcclBackend() override;
  NcclBackend(const NcclBackend&) = delete;
  NcclBackend& operator=(const NcclBackend&) = delete;

  int device() const override { return device_; }
  bool capturing() const override;
  void abort() override;  // ncclCommAbort
  std::shared_ptr<DeviceCollectives> split(int color, int key, std::string name) override;  // ncclCommSplit

  // Tensors: contiguous, on device(), of dtype f32, bf16, f16 or i64 (avg: floating dtypes
  // only). all_gather and reduce_scatter take sizes that do not divide by the group size.
  // reduce is NCCL's; gather, scatter and all_to_all are one ncclSend/ncclRecv per peer in
  // one NCCL group (a single launch), and a copy on the stream for the rank's own block.
  WorkPtr all_reduce(const Tensor& t, ReduceOp op) override;
  WorkPtr broadcast(const Tensor& t, int root) override;
  WorkPtr all_gather(const Tensor& out, const Tensor& in) override;
  WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) override;
  WorkPtr reduce(const Tensor& t, int root, ReduceOp op) override;
  WorkPtr gather(const Tensor& out, const Tensor& in, int root) override;
  WorkPtr scatter(const Tensor& out, const Tensor& in, int root) override;
  WorkPtr all_to_all(const Tensor& out, const Tensor& in, const AllToAllLayout& layout) override;
  WorkPtr send_recv(const std::vector<P2POp>& ops) override;  // NCCL has no tags

 private:
  NcclBackend(ncclComm_t comm, std::string name, int device);
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Inside begin()/end(), on the communication stream: sends in_counts[r] elements of `in`
  // from in_offsets[r] to each peer r and receives out_counts[r] into `out` at
  // out_offsets[r], in one NCCL group; the rank's own block (in_counts[rank()] elements) is a
  // device copy. Zero counts move nothing; a tensor with only zero counts is not touched
  // (it may be undefined).
  void exchange(const Tensor& out, const std::vector<int64_t>& out_counts,
                const std::vector<int64_t>& out_offsets, const Tensor& in,
                const std::vector<int64_t>& in_counts, const std::vector<int64_t>& in_offsets);
  // begin(), `calls` (on the communication stream), end(tensors).
  WorkPtr launch(std::vector<Tensor> tensors, const std::function<void()>& calls);
  // gather (whole = out, part = in) or scatter (whole = in, part = out).
  WorkPtr rooted(const Tensor& whole, const Tensor& part, int root, bool gather);
  // Orders the communication stream after the compute stream's queued work.
  void begin();
  // Records the completion event, keeps `tensors` alive until it completes.
  std::shared_ptr<NcclWork> end(std::vector<Tensor> tensors);
  void reap_completed();

  std::shared_ptr<NcclComm> comm_;  // shared with the Works, which ask it for errors
  int rank_ = 0, size_ = 1;
  int device_ = 0;
  cuda::Stream stream_;
  cuda::Event compute_ready_;
  std::deque<std::shared_ptr<NcclWork>> in_flight_;  // in call order
};

}  // namespace dpt::dist
