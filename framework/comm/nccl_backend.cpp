// NcclBackend: NCCL calls on the backend's own stream, ordered against the device's compute
// stream by events (see the header for the waiting rules).
#include "comm/nccl_backend.h"

#include <functional>
#include <mutex>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device.h"
#include "backend/cuda/graph.h"
#include "core/error.h"
#include "comm/mpi_check.h"

namespace dpt::dist {

// The communicator as the backend and its Works share it: a Work asks it for NCCL's
// asynchronous error (on the watchdog's thread) while the backend may be destroying it.
struct NcclComm {
  std::mutex mutex;  // held to read `comm` from a Work, and to destroy it
  ncclComm_t comm = nullptr;
  std::string name;
};

// One collective's completion event and the tensors it uses.
class NcclWork final : public Work {
 public:
  // `captured`: queued inside a CUDA graph capture, so its event marks a point in the
  // graph, not in time; it can order streams within the capture but never be queried.
  NcclWork(int device, std::vector<Tensor> tensors, bool captured, std::shared_ptr<NcclComm> comm)
      : device_(device),
        tensors_(std::move(tensors)),
        captured_(captured),
        comm_(std::move(comm)) {}

  cuda::Event& done() { return done_; }
  void release() { tensors_.clear(); }

  void wait() override {
    cuda::DeviceGuard guard(device_);
    CUDA_CHECK(cudaStreamWaitEvent(cuda::compute_stream(device_), done_.get(), 0));
  }
  // A captured collective completes in each replay, never at a point the host can ask
  // about: false, and the caller's wait() joins the streams instead. Throws NCCL's
  // asynchronous error (a peer gone, a network failure) while not complete.
  bool is_completed() override {
    if (captured_) return false;
    cuda::DeviceGuard guard(device_);
    if (done_.query()) return true;
    std::lock_guard<std::mutex> lock(comm_->mutex);
    if (!comm_->comm) return false;
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_->comm, &async));
    DPT_CHECK(async == ncclSuccess || async == ncclInProgress)
        << "NCCL on " << comm_->name << " failed: " << ncclGetErrorString(async);
    return false;
  }

 private:
  int device_;
  cuda::Event done_;  // made on the current device: the backend's, set by the caller
  std::vector<Tensor> tensors_;
  bool captured_;
  std::shared_ptr<NcclComm> comm_;
};

namespace {

// Indexed by DType {f32, bf16, f16, i64} and ReduceOp {sum, avg, min, max}.
ncclDataType_t nccl_type(DType dtype) {
  static constexpr ncclDataType_t kTypes[] = {ncclFloat32, ncclBfloat16, ncclFloat16, ncclInt64};
  return kTypes[static_cast<int>(dtype)];
}

ncclRedOp_t nccl_op(ReduceOp op) {
  static constexpr ncclRedOp_t kOps[] = {ncclSum, ncclAvg, ncclMin, ncclMax};
  return kOps[static_cast<int>(op)];
}

char* byte_ptr(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

}  // namespace

std::shared_ptr<DeviceCollectives> NcclBackend::create(MPI_Comm bootstrap, const std::string& name, int device) {
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
  return std::shared_ptr<NcclBackend>(new NcclBackend(comm, name, device));
}

std::shared_ptr<DeviceCollectives> NcclBackend::split(int color, int key, std::string name) {
  cuda::DeviceGuard guard(device_);
  ncclComm_t child = nullptr;
  NCCL_CHECK(ncclCommSplit(comm_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr));
  if (!child) return nullptr;
  return std::shared_ptr<NcclBackend>(new NcclBackend(child, std::move(name), device_));
}

NcclBackend::NcclBackend(ncclComm_t comm, std::string name, int device)
    : comm_(std::make_shared<NcclComm>()), device_(device), stream_(device) {
  comm_->comm = comm;
  comm_->name = std::move(name);
  NCCL_CHECK(ncclCommUserRank(comm, &rank_));
  NCCL_CHECK(ncclCommCount(comm, &size_));
}

NcclBackend::~NcclBackend() {
  // Let queued collectives finish before the communicator goes (the watchdog ends the job
  // if they never do: so not under comm_->mutex, which the watchdog's queries take); never
  // throw from here (DeviceGuard throws when the CUDA runtime is already being torn down
  // at exit).
  try {
    cuda::DeviceGuard guard(device_);
    (void)cudaStreamSynchronize(stream_.get());
    in_flight_.clear();
    ncclComm_t comm = nullptr;
    {
      std::lock_guard<std::mutex> lock(comm_->mutex);
      std::swap(comm, comm_->comm);
    }
    if (comm) (void)ncclCommDestroy(comm);  // null: aborted, and ncclCommAbort freed it
  } catch (...) {
  }
}

bool NcclBackend::capturing() const { return cuda::capture_active(device_); }

void NcclBackend::abort() {
  ncclComm_t comm = nullptr;
  {
    std::lock_guard<std::mutex> lock(comm_->mutex);
    std::swap(comm, comm_->comm);
  }
  if (comm) (void)ncclCommAbort(comm);  // later calls get a null communicator: NCCL's error
}

void NcclBackend::reap_completed() {
  while (!in_flight_.empty() && in_flight_.front()->is_completed()) {
    in_flight_.front()->release();
    in_flight_.pop_front();
  }
}

void NcclBackend::begin() {
  // Event queries are forbidden on a capturing thread; Graph::capture synchronised the
  // device before it began, so the works in flight are done and reaped after it. Reaping
  // also throws NCCL's asynchronous error, if any.
  if (!capturing()) reap_completed();
  compute_ready_.record(cuda::compute_stream(device_));
  stream_.wait(compute_ready_);
}

std::shared_ptr<NcclWork> NcclBackend::end(std::vector<Tensor> tensors) {
  // A captured collective runs in every replay, so its tensors must outlive the graph (the
  // caller's job: DDP's buckets and the model's buffers do); its work is never queried, so
  // it is not kept in flight.
  const bool captured = capturing();
  auto work = std::make_shared<NcclWork>(device_, std::move(tensors), captured, comm_);
  work->done().record(stream_);
  if (!captured) in_flight_.push_back(work);
  return work;
}

WorkPtr NcclBackend::launch(std::vector<Tensor> tensors, const std::function<void()>& calls) {
  cuda::DeviceGuard guard(device_);
  begin();
  calls();
  return end(std::move(tensors));
}

WorkPtr NcclBackend::all_reduce(const Tensor& t, ReduceOp op) {
  const size_t n = static_cast<size_t>(t.numel());
  return launch({t}, [&] {
    if (n > 0)
      NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), n, nccl_type(t.dtype()), nccl_op(op), comm_->comm,
                               stream_.get()));
  });
}

WorkPtr NcclBackend::broadcast(const Tensor& t, int root) {
  const size_t n = static_cast<size_t>(t.numel());
  return launch({t}, [&] {
    if (n > 0)
      NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), n, nccl_type(t.dtype()), root, comm_->comm,
                               stream_.get()));
  });
}

WorkPtr NcclBackend::all_gather(const Tensor& out, const Tensor& in) {
  const int64_t n = out.numel();
  const size_t element = dtype_size(out.dtype());
  const ncclDataType_t type = nccl_type(out.dtype());
  cuda::DeviceGuard guard(device_);
  begin();
  if (n > 0 && n % size() == 0) {
    NCCL_CHECK(ncclAllGather(in.raw_data(), out.raw_data(), static_cast<size_t>(n / size()), type, comm_->comm,
                             stream_.get()));
  } else if (n > 0) {
    // Uneven chunks: one broadcast per rank of its chunk, fused into one launch.
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size(); ++r) {
      Chunk c = chunk_of(n, size(), r);
      if (c.end == c.begin) continue;
      char* dst = byte_ptr(out) + c.begin * element;
      const void* src = r == rank() ? in.raw_data() : dst;
      NCCL_CHECK(ncclBroadcast(src, dst, static_cast<size_t>(c.end - c.begin), type, r, comm_->comm,
                               stream_.get()));
    }
    NCCL_CHECK(ncclGroupEnd());
  }
  return end({out, in});
}

WorkPtr NcclBackend::reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) {
  const int64_t n = in.numel();
  const size_t element = dtype_size(in.dtype());
  const ncclDataType_t type = nccl_type(in.dtype());
  cuda::DeviceGuard guard(device_);
  begin();
  if (n > 0 && n % size() == 0) {
    NCCL_CHECK(ncclReduceScatter(in.raw_data(), out.raw_data(), static_cast<size_t>(n / size()), type,
                                 nccl_op(op), comm_->comm, stream_.get()));
  } else if (n > 0) {
    // Uneven chunks: one reduce per rank to that rank's chunk, fused into one launch.
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size(); ++r) {
      Chunk c = chunk_of(n, size(), r);
      if (c.end == c.begin) continue;
      void* dst = r == rank() ? out.raw_data() : nullptr;
      NCCL_CHECK(ncclReduce(byte_ptr(in) + c.begin * element, dst, static_cast<size_t>(c.end - c.begin), type,
                            nccl_op(op), r, comm_->comm, stream_.get()));
    }
    NCCL_CHECK(ncclGroupEnd());
  }
  return end({out, in});
}

WorkPtr NcclBackend::reduce(const Tensor& t, int root, ReduceOp op) {
  return launch({t}, [&] {
    if (t.numel() > 0)
      NCCL_CHECK(ncclReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                            nccl_op(op), root, comm_->comm, stream_.get()));
  });
}

void NcclBackend::exchange(const Tensor& out, const std::vector<int64_t>& out_counts,
                           const std::vector<int64_t>& out_offsets, const Tensor& in,
                           const std::vector<int64_t>& in_counts, const std::vector<int64_t>& in_offsets) {
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
                          comm_->comm, stream_.get()));
    if (out_counts[r] > 0)
      NCCL_CHECK(ncclRecv(byte_ptr(out) + out_offsets[r] * element, static_cast<size_t>(out_counts[r]), type,
                          r, comm_->comm, stream_.get()));
  }
  NCCL_CHECK(ncclGroupEnd());
}

WorkPtr NcclBackend::rooted(const Tensor& whole, const Tensor& part, int root, bool gather) {
  // Root exchanges block r of `whole` with rank r (its own by a copy); every other rank sends
  // root its part (gather) or receives it from root (scatter).
  const int64_t m = part.numel();
  std::vector<int64_t> whole_counts(size(), 0), offsets(size(), 0), part_counts(size(), 0), zeros(size(), 0);
  if (rank() == root) {
    for (int r = 0; r < size(); ++r) {
      whole_counts[r] = m;
      offsets[r] = r * m;
    }
  }
  part_counts[root] = m;
  return launch(rank() == root ? std::vector<Tensor>{whole, part} : std::vector<Tensor>{part}, [&] {
    if (gather)
      exchange(whole, whole_counts, offsets, part, part_counts, zeros);
    else
      exchange(part, part_counts, zeros, whole, whole_counts, offsets);
  });
}

WorkPtr NcclBackend::gather(const Tensor& out, const Tensor& in, int root) {
  return rooted(out, in, root, true);
}

WorkPtr NcclBackend::scatter(const Tensor& out, const Tensor& in, int root) {
  return rooted(in, out, root, false);
}

WorkPtr NcclBackend::all_to_all(const Tensor& out, const Tensor& in, const AllToAllLayout& l) {
  return launch({out, in},
                [&] { exchange(out, l.out_counts, l.out_offsets, in, l.in_counts, l.in_offsets); });
}

WorkPtr NcclBackend::send_recv(const std::vector<P2POp>& ops) {
  cuda::DeviceGuard guard(device_);
  begin();
  std::vector<Tensor> tensors;
  NCCL_CHECK(ncclGroupStart());
  for (const P2POp& op : ops) {
    tensors.push_back(op.tensor);
    if (op.tensor.numel() == 0) continue;
    const size_t n = static_cast<size_t>(op.tensor.numel());
    if (op.send)
      NCCL_CHECK(ncclSend(op.tensor.raw_data(), n, nccl_type(op.tensor.dtype()), op.peer, comm_->comm,
                          stream_.get()));
    else
      NCCL_CHECK(ncclRecv(op.tensor.raw_data(), n, nccl_type(op.tensor.dtype()), op.peer, comm_->comm,
                          stream_.get()));
  }
  NCCL_CHECK(ncclGroupEnd());
  return end(std::move(tensors));
}

namespace {

// The CUDA collectives of every process group, from when the library loads.
const bool registered = [] {
  register_cuda_collectives(&NcclBackend::create);
  return true;
}();

}  // namespace

}  // namespace dpt::dist
