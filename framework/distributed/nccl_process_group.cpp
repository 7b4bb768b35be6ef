// NcclProcessGroup: NCCL collectives on the group's own stream, ordered against the
// device's compute stream by events (see the header for the waiting rules).
#include "distributed/nccl_process_group.h"

#include <sstream>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device.h"
#include "backend/cuda/graph.h"
#include "core/error.h"
#include "distributed/mpi_check.h"

namespace dpt::dist {

// One collective's completion event and the tensors it uses.
class NcclWork final : public Work {
 public:
  // `captured`: queued inside a CUDA graph capture, so its event marks a point in the
  // graph, not in time; it can order streams within the capture but never be queried.
  NcclWork(int device, std::vector<Tensor> tensors, bool host_wait, bool captured)
      : device_(device), tensors_(std::move(tensors)), host_wait_(host_wait), captured_(captured) {}

  cuda::Event& done() { return done_; }
  void release() { tensors_.clear(); }

  void wait() override {
    cuda::DeviceGuard guard(device_);
    DPT_CHECK(!(host_wait_ && captured_)) << "a barrier on NCCL inside a CUDA graph capture: the host cannot "
                                             "wait for a collective that has only been recorded";
    if (host_wait_)
      done_.synchronize();
    else
      CUDA_CHECK(cudaStreamWaitEvent(cuda::compute_stream(device_), done_.get(), 0));
  }
  // A captured collective completes in each replay, never at a point the host can ask
  // about: false, and the caller's wait() joins the streams instead.
  bool is_completed() override {
    if (captured_) return false;
    cuda::DeviceGuard guard(device_);
    return done_.query();
  }

 private:
  int device_;
  cuda::Event done_;  // made on the current device: the group's, set by the caller
  std::vector<Tensor> tensors_;
  bool host_wait_;
  bool captured_;
};

namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i64:
      return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::min:
      return ncclMin;
    case ReduceOp::max:
      return ncclMax;
  }
  return ncclSum;
}

char* byte_ptr(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

}  // namespace

std::shared_ptr<NcclProcessGroup> NcclProcessGroup::create(MPI_Comm bootstrap, std::vector<int> world_ranks,
                                                           std::string name, int device) {
  int rank = 0, size = 0;
  MPI_CHECK(MPI_Comm_rank(bootstrap, &rank));
  MPI_CHECK(MPI_Comm_size(bootstrap, &size));
  cuda::cuda_check_device(device);
  cuda::DeviceGuard guard(device);
  ncclUniqueId id{};
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, bootstrap));
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  return std::shared_ptr<NcclProcessGroup>(
      new NcclProcessGroup(comm, rank, std::move(world_ranks), std::move(name), device));
}

std::shared_ptr<NcclProcessGroup> NcclProcessGroup::split(int color, int key, std::vector<int> world_ranks,
                                                          std::string name) {
  cuda::DeviceGuard guard(device_);
  ncclComm_t child = nullptr;
  NCCL_CHECK(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr));
  if (!child) return nullptr;
  int rank = 0;
  NCCL_CHECK(ncclCommUserRank(child, &rank));
  return std::shared_ptr<NcclProcessGroup>(
      new NcclProcessGroup(child, rank, std::move(world_ranks), std::move(name), device_));
}

NcclProcessGroup::NcclProcessGroup(ncclComm_t comm, int rank, std::vector<int> world_ranks, std::string name,
                                   int device)
    : ProcessGroup(rank, std::move(world_ranks), std::move(name)),
      comm_(comm),
      device_(device),
      stream_(device) {
  scratch_ = Tensor::zeros({1}, DType::f32, Device::cuda(device));
}

NcclProcessGroup::~NcclProcessGroup() {
  // Let queued collectives finish before the communicator goes; never throw from here
  // (DeviceGuard throws when the CUDA runtime is already being torn down at exit).
  try {
    cuda::DeviceGuard guard(device_);
    (void)cudaStreamSynchronize(stream_.get());
    in_flight_.clear();
    (void)ncclCommDestroy(comm_);
  } catch (...) {
  }
}

void NcclProcessGroup::check_tensor(const char* op, const Tensor& t, const char* what) const {
  DPT_CHECK(t.defined()) << op << " on " << name() << " (NCCL): " << what << " is an undefined tensor";
  DPT_CHECK(t.device() == Device::cuda(device_))
      << op << " on " << name() << " (NCCL): " << what << " is on " << t.device().str()
      << ", the group's device is cuda:" << device_;
  DPT_CHECK(t.is_contiguous()) << op << " on " << name() << " (NCCL): " << what << " (shape "
                               << shape_str(t.shape()) << ") must be contiguous";
}

void NcclProcessGroup::check_async_error() const {
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
  DPT_CHECK(async == ncclSuccess) << "NCCL group " << name() << " failed: " << ncclGetErrorString(async);
}

void NcclProcessGroup::reap_completed() {
  while (!in_flight_.empty() && in_flight_.front()->is_completed()) {
    in_flight_.front()->release();
    in_flight_.pop_front();
  }
}

void NcclProcessGroup::begin() {
  check_async_error();
  // Event queries are forbidden on a capturing thread; Graph::capture synchronised the
  // device before it began, so the works in flight are done and reaped after it.
  if (!cuda::capture_active(device_)) reap_completed();
  compute_ready_.record(cuda::compute_stream(device_));
  stream_.wait(compute_ready_);
}

std::shared_ptr<NcclWork> NcclProcessGroup::end(std::vector<Tensor> tensors, bool host_wait) {
  // A captured collective runs in every replay, so its tensors must outlive the graph (the
  // caller's job: DDP's buckets and the model's buffers do); its work is never queried, so
  // it is not kept in flight.
  const bool captured = cuda::capture_active(device_);
  auto work = std::make_shared<NcclWork>(device_, std::move(tensors), host_wait, captured);
  work->done().record(stream_);
  if (!captured) in_flight_.push_back(work);
  return work;
}

WorkPtr NcclProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor("all_reduce", t, "the tensor");
  DPT_CHECK(op != ReduceOp::avg || t.dtype() != DType::i64)
      << "all_reduce on " << name() << " (NCCL): avg needs a floating dtype, got i64";
  cuda::DeviceGuard guard(device_);
  begin();
  if (t.numel() > 0)
    NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                             nccl_op(op), comm_, stream_.get()));
  return end({t}, false);
}

WorkPtr NcclProcessGroup::broadcast(const Tensor& t, int root) {
  check_tensor("broadcast", t, "the tensor");
  DPT_CHECK(root >= 0 && root < size())
      << "broadcast on " << name() << ": root " << root << " is not a rank of this group of " << size();
  cuda::DeviceGuard guard(device_);
  begin();
  if (t.numel() > 0)
    NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                             root, comm_, stream_.get()));
  return end({t}, false);
}

WorkPtr NcclProcessGroup::all_gather(const Tensor& out, const Tensor& in) {
  check_tensor("all_gather", out, "out");
  check_tensor("all_gather", in, "in");
  DPT_CHECK(in.dtype() == out.dtype()) << "all_gather on " << name() << ": out is " << dtype_name(out.dtype())
                                       << " but in is " << dtype_name(in.dtype());
  const int64_t n = out.numel();
  const Chunk mine = chunk_of(n, size(), rank());
  DPT_CHECK(in.numel() == mine.end - mine.begin)
      << "all_gather on " << name() << ": out has " << n << " elements, so rank " << rank()
      << "'s in must have " << mine.end - mine.begin << " (chunk_of), got " << in.numel();
  const size_t element = dtype_size(out.dtype());
  const ncclDataType_t type = nccl_type(out.dtype());
  cuda::DeviceGuard guard(device_);
  begin();
  if (n > 0 && n % size() == 0) {
    NCCL_CHECK(ncclAllGather(in.raw_data(), out.raw_data(), static_cast<size_t>(n / size()), type, comm_,
                             stream_.get()));
  } else if (n > 0) {
    // Uneven chunks: one broadcast per rank of its chunk, fused into one launch.
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size(); ++r) {
      Chunk c = chunk_of(n, size(), r);
      if (c.end == c.begin) continue;
      char* dst = byte_ptr(out) + c.begin * element;
      const void* src = r == rank() ? in.raw_data() : dst;
      NCCL_CHECK(
          ncclBroadcast(src, dst, static_cast<size_t>(c.end - c.begin), type, r, comm_, stream_.get()));
    }
    NCCL_CHECK(ncclGroupEnd());
  }
  return end({out, in}, false);
}

WorkPtr NcclProcessGroup::reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) {
  check_tensor("reduce_scatter", out, "out");
  check_tensor("reduce_scatter", in, "in");
  DPT_CHECK(in.dtype() == out.dtype()) << "reduce_scatter on " << name() << ": out is "
                                       << dtype_name(out.dtype()) << " but in is " << dtype_name(in.dtype());
  DPT_CHECK(op != ReduceOp::avg || in.dtype() != DType::i64)
      << "reduce_scatter on " << name() << " (NCCL): avg needs a floating dtype, got i64";
  const int64_t n = in.numel();
  const Chunk mine = chunk_of(n, size(), rank());
  DPT_CHECK(out.numel() == mine.end - mine.begin)
      << "reduce_scatter on " << name() << ": in has " << n << " elements, so rank " << rank()
      << "'s out must have " << mine.end - mine.begin << " (chunk_of), got " << out.numel();
  const size_t element = dtype_size(in.dtype());
  const ncclDataType_t type = nccl_type(in.dtype());
  cuda::DeviceGuard guard(device_);
  begin();
  if (n > 0 && n % size() == 0) {
    NCCL_CHECK(ncclReduceScatter(in.raw_data(), out.raw_data(), static_cast<size_t>(n / size()), type,
                                 nccl_op(op), comm_, stream_.get()));
  } else if (n > 0) {
    // Uneven chunks: one reduce per rank to that rank's chunk, fused into one launch.
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size(); ++r) {
      Chunk c = chunk_of(n, size(), r);
      if (c.end == c.begin) continue;
      void* dst = r == rank() ? out.raw_data() : nullptr;
      NCCL_CHECK(ncclReduce(byte_ptr(in) + c.begin * element, dst, static_cast<size_t>(c.end - c.begin), type,
                            nccl_op(op), r, comm_, stream_.get()));
    }
    NCCL_CHECK(ncclGroupEnd());
  }
  return end({out, in}, false);
}

WorkPtr NcclProcessGroup::reduce(const Tensor& t, int root, ReduceOp op) {
  check_tensor("reduce", t, "the tensor");
  DPT_CHECK(root >= 0 && root < size())
      << "reduce on " << name() << ": root " << root << " is not a rank of this group of " << size();
  DPT_CHECK(op != ReduceOp::avg || t.dtype() != DType::i64)
      << "reduce on " << name() << " (NCCL): avg needs a floating dtype, got i64";
  cuda::DeviceGuard guard(device_);
  begin();
  if (t.numel() > 0)
    NCCL_CHECK(ncclReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                          nccl_op(op), root, comm_, stream_.get()));
  return end({t}, false);
}

void NcclProcessGroup::exchange(const Tensor& out, const std::vector<int64_t>& out_counts,
                                const std::vector<int64_t>& out_offsets, const Tensor& in,
                                const std::vector<int64_t>& in_counts,
                                const std::vector<int64_t>& in_offsets) {
  const DType dtype = out.defined() ? out.dtype() : in.dtype();
  const size_t element = dtype_size(dtype);
  const ncclDataType_t type = nccl_type(dtype);
  const int me = rank();
  if (in_counts[me] > 0)
    CUDA_CHECK(cudaMemcpyAsync(
        byte_ptr(out) + out_offsets[me] * element, byte_ptr(in) + in_offsets[me] * element,
        static_cast<size_t>(in_counts[me]) * element, cudaMemcpyDeviceToDevice, stream_.get()));
  NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < size(); ++r) {
    if (r == me) continue;
    if (in_counts[r] > 0)
      NCCL_CHECK(ncclSend(byte_ptr(in) + in_offsets[r] * element, static_cast<size_t>(in_counts[r]), type, r,
                          comm_, stream_.get()));
    if (out_counts[r] > 0)
      NCCL_CHECK(ncclRecv(byte_ptr(out) + out_offsets[r] * element, static_cast<size_t>(out_counts[r]), type,
                          r, comm_, stream_.get()));
  }
  NCCL_CHECK(ncclGroupEnd());
}

WorkPtr NcclProcessGroup::gather(const Tensor& out, const Tensor& in, int root) {
  check_tensor("gather", in, "in");
  if (rank() == root) check_tensor("gather", out, "out");
  check_gather(*this, out, in, root);
  // Root receives block r from rank r (its own by a copy); every other rank sends root its in.
  const int64_t m = in.numel();
  std::vector<int64_t> out_counts(size(), 0), out_offsets(size(), 0), in_counts(size(), 0),
      in_offsets(size(), 0);
  if (rank() == root) {
    for (int r = 0; r < size(); ++r) {
      out_counts[r] = m;
      out_offsets[r] = r * m;
    }
  }
  in_counts[root] = m;
  cuda::DeviceGuard guard(device_);
  begin();
  exchange(out, out_counts, out_offsets, in, in_counts, in_offsets);
  return end(rank() == root ? std::vector<Tensor>{out, in} : std::vector<Tensor>{in}, false);
}

WorkPtr NcclProcessGroup::scatter(const Tensor& out, const Tensor& in, int root) {
  check_tensor("scatter", out, "out");
  if (rank() == root) check_tensor("scatter", in, "in");
  check_scatter(*this, out, in, root);
  // Root sends block r to rank r (its own by a copy); every other rank receives its out from root.
  const int64_t m = out.numel();
  std::vector<int64_t> out_counts(size(), 0), out_offsets(size(), 0), in_counts(size(), 0),
      in_offsets(size(), 0);
  if (rank() == root) {
    for (int r = 0; r < size(); ++r) {
      in_counts[r] = m;
      in_offsets[r] = r * m;
    }
  }
  out_counts[root] = m;
  cuda::DeviceGuard guard(device_);
  begin();
  exchange(out, out_counts, out_offsets, in, in_counts, in_offsets);
  return end(rank() == root ? std::vector<Tensor>{out, in} : std::vector<Tensor>{out}, false);
}

WorkPtr NcclProcessGroup::all_to_all(const Tensor& out, const Tensor& in,
                                     const std::vector<int64_t>& out_splits,
                                     const std::vector<int64_t>& in_splits) {
  check_tensor("all_to_all", out, "out");
  check_tensor("all_to_all", in, "in");
  const AllToAllLayout l = all_to_all_layout(*this, out, in, out_splits, in_splits);
  cuda::DeviceGuard guard(device_);
  begin();
  exchange(out, l.out_counts, l.out_offsets, in, l.in_counts, l.in_offsets);
  return end({out, in}, false);
}

WorkPtr NcclProcessGroup::barrier() {
  cuda::DeviceGuard guard(device_);
  begin();
  NCCL_CHECK(
      ncclAllReduce(scratch_.raw_data(), scratch_.raw_data(), 1, ncclFloat32, ncclSum, comm_, stream_.get()));
  return end({}, true);
}

WorkPtr NcclProcessGroup::send(const Tensor& t, int dst, int tag) {
  check_tensor("send", t, "the tensor");
  DPT_CHECK(dst >= 0 && dst < size() && dst != rank())
      << "send on " << name() << ": dst " << dst << " must be another rank of this group of " << size();
  DPT_CHECK(tag == 0) << "send on " << name() << " (NCCL): tag " << tag << "; NCCL has no tags, use 0";
  cuda::DeviceGuard guard(device_);
  begin();
  if (t.numel() > 0)
    NCCL_CHECK(ncclSend(t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), dst, comm_,
                        stream_.get()));
  return end({t}, false);
}

WorkPtr NcclProcessGroup::recv(const Tensor& t, int src, int tag) {
  check_tensor("recv", t, "the tensor");
  DPT_CHECK(src >= 0 && src < size() && src != rank())
      << "recv on " << name() << ": src " << src << " must be another rank of this group of " << size();
  DPT_CHECK(tag == 0) << "recv on " << name() << " (NCCL): tag " << tag << "; NCCL has no tags, use 0";
  cuda::DeviceGuard guard(device_);
  begin();
  if (t.numel() > 0)
    NCCL_CHECK(ncclRecv(t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), src, comm_,
                        stream_.get()));
  return end({t}, false);
}

}  // namespace dpt::dist
