// MpiProcessGroup, the front end: checks each call's arguments on the calling thread,
// numbers and records it, then hands it to its backend: CPU tensors as an MpiOp (mpi_op.h,
// the Work) to the group's CommQueue, whose poll token's holder (the caller itself when the
// token is free, else whoever holds it) starts it; CUDA tensors to the NCCL backend, watched
// by the process watchdog.
#include "comm/mpi_process_group.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "comm/combine.h"
#include "comm/dist.h"
#include "comm/hierarchical.h"
#include "comm/mpi_check.h"
#include "comm/mpi_op.h"
#include "comm/shm_buffer.h"
#include "comm/watchdog.h"

namespace dpt::dist {

namespace {

bool debug_from_environment() {
  const char* text = std::getenv("DPT_DIST_DEBUG");
  if (!text || !*text || std::strcmp(text, "off") == 0) return false;
  DPT_CHECK(std::strcmp(text, "collectives") == 0)
      << "DPT_DIST_DEBUG must be 'collectives' or 'off', got '" << text << "'";
  return true;
}

std::chrono::milliseconds timeout_from_environment() {
  const char* text = std::getenv("DPT_DIST_TIMEOUT_S");
  if (!text || !*text) return std::chrono::milliseconds(0);
  char* end = nullptr;
  double seconds = std::strtod(text, &end);
  DPT_CHECK(end && *end == '\0' && seconds >= 0)
      << "DPT_DIST_TIMEOUT_S must be a number of seconds >= 0, got '" << text << "'";
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// DPT_SHM_ALLREDUCE_BYTES: the largest small all-reduce through shared memory (0: none).
unsigned long long shm_bytes_from_environment(size_t fallback) {
  const char* text = std::getenv("DPT_SHM_ALLREDUCE_BYTES");
  if (!text || !*text) return fallback;
  char* end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  DPT_CHECK(end && *end == '\0' && value >= 0 && value <= (1ll << 30))
      << "DPT_SHM_ALLREDUCE_BYTES must be a byte count 0..2^30 (0 disables the shared-memory "
      << "all-reduce), got '" << text << "'";
  return static_cast<unsigned long long>(value);
}

int comm_rank(MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank;
}

DeviceCollectivesMaker g_cuda_maker = nullptr;  // set once, while the library loads

}  // namespace

void register_cuda_collectives(DeviceCollectivesMaker maker) { g_cuda_maker = maker; }
DeviceCollectivesMaker cuda_collectives_maker() { return g_cuda_maker; }

std::vector<int> comm_world_ranks(MPI_Comm comm) {
  int size = 0;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_Group group, world;
  MPI_CHECK(MPI_Comm_group(comm, &group));
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> ranks(size), world_ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  MPI_CHECK(MPI_Group_translate_ranks(group, size, ranks.data(), world, world_ranks.data()));
  MPI_CHECK(MPI_Group_free(&group));
  MPI_CHECK(MPI_Group_free(&world));
  return world_ranks;
}

std::string ranks_str(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(ranks[i]);
  }
  s += ']';
  return s;
}

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, std::vector<int> world_ranks, std::string name)
    : ProcessGroup(comm_rank(comm), std::move(world_ranks), std::move(name)),
      comm_(comm),
      timeout_ms_(timeout_from_environment().count()),
      debug_collectives_(debug_from_environment()) {
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_dup(comm_, &creation_));
  MPI_CHECK(MPI_Comm_set_errhandler(creation_, MPI_ERRORS_RETURN));
  flight_ = std::make_shared<FlightRing>(this->name(), rank(), this->world_ranks());
  flight_register(flight_);
  control_ = std::make_shared<ControlChannel>(comm_, flight_);
  int* tag_ub = nullptr;
  int found = 0;
  MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found));
  if (found && tag_ub) tag_ub_ = *tag_ub;
  on_one_node_ = size() > 1 && all_on_this_node(creation_);
  if (on_one_node_) {
    // The smallest limit any rank asks for, so all ranks take the same path for a message.
    unsigned long long bytes = shm_bytes_from_environment(kShmAllReduceBytes);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, creation_));
    if (bytes > 0) shm_ = ShmBuffer::create(creation_, 2 * round_up(bytes, 64), true);
  }
}

MpiProcessGroup::~MpiProcessGroup() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpt: destroying process group %s: %s\n", name().c_str(), e.what());
  }
}

void MpiProcessGroup::shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mutex_);
  if (shut_down_.exchange(true)) return;
  if (!queue_.stop(timeout())) {
    abort_all("process group " + name() + ": " + std::to_string(queue_.pending()) +
                  " collective(s) still not complete when the group was shut down (dist::finalize() or "
                  "destruction); another rank did not call them",
              1);
  }
  control_->shutdown();
  // After this group's own collectives, whose hierarchical all-reduces post to them.
  for (MpiProcessGroup* sub : sub_groups()) sub->shutdown();
  {
    // The NCCL backend goes here, not with the object: dist::finalize() shuts every group down
    // newest first on every rank, before MPI_Finalize, while the CUDA runtime is alive — a
    // GroupPtr someone keeps past finalize() would otherwise destroy its communicator at
    // static destruction, and keep serving CUDA collectives after shutdown.
    std::lock_guard<std::mutex> nccl_lock(nccl_mutex_);
    nccl_.reset();
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // MPI has freed every communicator already
  shm_.reset();           // local: the other ranks keep their mappings until they let go
  MPI_CHECK(MPI_Comm_free(&creation_));
  MPI_CHECK(MPI_Comm_free(&comm_));
}

void MpiProcessGroup::set_timeout(std::chrono::milliseconds timeout) {
  timeout_ms_ = timeout.count();
  for (MpiProcessGroup* sub : sub_groups()) sub->set_timeout(timeout);
}

std::vector<MpiProcessGroup*> MpiProcessGroup::sub_groups() const {
  std::vector<MpiProcessGroup*> subs;
  for (const GroupPtr& g : {host_groups_.host, host_groups_.across})
    if (g) subs.push_back(static_cast<MpiProcessGroup*>(g.get()));  // made by make_host_groups
  return subs;
}

void MpiProcessGroup::make_host_groups(int node) {
  DPT_CHECK(!host_groups_.across) << name() << " has host groups already";
  flat_reason_.clear();
  // This group's ranks on this host, and how many each host holds.
  MPI_Comm host = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(creation_comm(), node, rank(), &host));
  int local_rank = 0, local_size = 1;
  MPI_CHECK(MPI_Comm_rank(host, &local_rank));
  MPI_CHECK(MPI_Comm_size(host, &local_size));
  int sizes[2] = {local_size, -local_size};  // min and -max over the hosts
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MIN, creation_));
  const int fewest = sizes[0], most = -sizes[1];
  if (most == size() || fewest != most) {
    MPI_CHECK(MPI_Comm_free(&host));
    if (fewest != most)
      flat_reason_ = "its hosts hold between " + std::to_string(fewest) + " and " + std::to_string(most) +
                     " of its ranks (the hierarchical all-reduce needs the same number on every host)";
    return;
  }
  // Both kinds of sub-group: made by every rank, never registered with dist (this group owns
  // them), checked by this group's debug mode rather than their own (their collectives are
  // posted from inside this group's, where a blocking check must not run).
  auto sub_group = [&](MPI_Comm comm, const char* kind) {
    std::vector<int> ranks = comm_world_ranks(comm);
    auto group = std::make_shared<MpiProcessGroup>(comm, ranks, name() + kind + ranks_str(ranks));
    group->set_timeout(timeout());
    group->set_debug_collectives(false);
    return group;
  };
  MPI_Comm across = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(creation_, local_rank, rank(), &across));
  host_groups_.across = sub_group(across, ".across");
  if (local_size > 1) {
    host_groups_.host = sub_group(host, ".host");
  } else {
    MPI_CHECK(MPI_Comm_free(&host));
  }
}

std::string MpiProcessGroup::all_reduce_text() const {
  if (!flat_reason_.empty()) return "flat all-reduce: " + flat_reason_;
  if (!host_groups_.across) return "";
  const bool many = host_groups_.host != nullptr;  // more than one rank per host
  const std::string per_host = many ? std::to_string(host_groups_.host->size()) + " ranks" : "1 rank";
  const std::string layout = std::to_string(host_groups_.across->size()) + " hosts x " + per_host;
  switch (hierarchical_.load()) {
    case Hierarchical::on:
      return "hierarchical all-reduce: " + layout;
    case Hierarchical::off:
      return "flat all-reduce: " + layout + ", distributed.hierarchical false";
    case Hierarchical::automatic:
      break;
  }
  return (many ? "hierarchical all-reduce: " : "flat all-reduce: ") + layout;
}

DeviceCollectives& MpiProcessGroup::nccl(const Tensor& t) {
  std::lock_guard<std::mutex> lock(nccl_mutex_);
  if (!nccl_) {
    const DeviceCollectivesMaker make = cuda_collectives_maker();
    DPT_CHECK(make) << "process group " << name() << ": a " << t.device().str()
                    << " tensor, but dpt was built without CUDA";
    nccl_ = make(creation_comm(), name(), t.device().index);
  }
  DPT_CHECK(nccl_->device() == t.device().index)
      << "process group " << name() << ": a collective on " << t.device().str() << ", but this rank's NCCL "
      << "communicator is on cuda:" << nccl_->device() << " (one device per rank)";
  return *nccl_;
}

void MpiProcessGroup::split_nccl(int color, int key, MpiProcessGroup* child) {
  std::lock_guard<std::mutex> lock(nccl_mutex_);
  if (!nccl_) return;  // the child makes its own on first use
  auto twin = nccl_->split(child ? color : -1, key, child ? child->name() : std::string());
  if (child) child->nccl_ = std::move(twin);
}

MPI_Comm MpiProcessGroup::creation_comm() const {
  DPT_CHECK(!shut_down_) << "process group " << name() << " used after it was shut down (dist::finalize())";
  return creation_;
}

WorkPtr MpiProcessGroup::post(std::shared_ptr<MpiOp> task, const AllToAllLayout* layout) {
  announce(*task, layout);
  queue_.post(task, timeout());
  return task;
}

void MpiProcessGroup::announce(MpiOp& call, const AllToAllLayout* layout) {
  DPT_CHECK(!shut_down_) << call.describe() << ": the group was used after it was shut down (dist::finalize())";
  if (call.kind == OpKind::send || call.kind == OpKind::recv) return;
  const CallSignature signature = call.signature();
  call.control = control_.get();
  call.flight = flight_.get();
  call.seq = flight_->queued(signature);
  if (debug_collectives_.load(std::memory_order_relaxed)) {
    const std::chrono::milliseconds limit = timeout();
    const ControlChannel::Clock::time_point deadline =
        limit.count() > 0 ? ControlChannel::Clock::now() + limit : ControlChannel::Clock::time_point::max();
    control_->check_same(call.seq, signature, deadline);
    if (layout) control_->check_counts(call.seq, signature, layout->in_counts, layout->out_counts, deadline);
  }
}

WorkPtr MpiProcessGroup::post_nccl(std::shared_ptr<MpiOp> call, const Tensor& t,
                                   const std::function<WorkPtr(DeviceCollectives&)>& launch,
                                   const AllToAllLayout* layout) {
  DeviceCollectives& backend = nccl(t);  // first: made collectively, and refused after shutdown
  const bool collective = call->kind != OpKind::send && call->kind != OpKind::recv;
  announce(*call, layout);
  // From here the call only describes, for the watchdog, which may outlive this group: it
  // gets its own copy of the name, and the backend keeps the tensors alive.
  auto group_name = std::make_shared<const std::string>(name());
  call->group_name = group_name.get();
  call->out = call->in = Tensor();
  WorkPtr work = launch(backend);
  if (collective) flight_->started(call->seq);
  if (backend.capturing()) return work;  // it completes in each replay, never to the host
  Watchdog::Watched watched;
  watched.work = work;
  watched.timeout = timeout();
  if (collective) watched.completed = [flight = flight_, seq = call->seq] { flight->completed(seq); };
  watched.describe = [call, group_name] { return call->describe(); };
  // The control channel is shared so that its diagnosis outlives this group.
  watched.detail = [call, group_name, control = control_] { return call->timeout_detail(); };
  watched.abort = [weak = std::weak_ptr<DeviceCollectives>(nccl_)] {
    if (auto b = weak.lock()) b->abort();
  };
  process_watchdog().watch(std::move(watched));
  return work;
}

void MpiProcessGroup::check_tensor(const char* op, const Tensor& t, const char* what, Device device,
                                   bool moves_only) const {
  const char* backend = device.is_cuda() ? " (NCCL)" : "";
  DPT_CHECK(t.defined()) << op << " on " << name() << backend << ": " << what << " is an undefined tensor";
  DPT_CHECK(t.device() == device) << op << " on " << name() << backend << ": " << what << " is on "
                                  << t.device().str() << ", the call's other tensors on " << device.str();
  DPT_CHECK(t.is_contiguous()) << op << " on " << name() << backend << ": " << what << " (shape "
                               << shape_str(t.shape()) << ") must be contiguous";
  if (device.is_cuda()) return;  // NCCL moves and reduces every dtype dpt has (avg: check_reduce)
  DPT_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::i64 || (moves_only && t.dtype() == DType::bf16))
      << op << " on " << name() << ": " << what << " has dtype " << dtype_name(t.dtype())
      << "; the MPI backend supports f32 and i64"
      << (moves_only ? ", and bf16 for collectives that move data" : "");
  DPT_CHECK(t.numel() <= INT_MAX) << op << " on " << name() << ": " << what << " has " << t.numel()
                                  << " elements; MPI counts are int, at most " << INT_MAX;
}

void MpiProcessGroup::check_reduce(const char* op, const Tensor& t, ReduceOp reduce) const {
  DPT_CHECK(!t.device().is_cuda() || reduce != ReduceOp::avg || t.dtype() != DType::i64)
      << op << " on " << name() << " (NCCL): avg needs a floating dtype, got i64";
}

void MpiProcessGroup::check_peer(const char* op, const char* what, int peer) const {
  DPT_CHECK(peer >= 0 && peer < size())
      << op << " on " << name() << ": " << what << " " << peer << " is not a rank of this group of " << size()
      << " (0.." << size() - 1 << ")";
}

void MpiProcessGroup::check_tag(const char* op, int tag) const {
  DPT_CHECK(tag >= 0 && tag <= tag_ub_)
      << op << " on " << name() << ": tag " << tag << " is outside 0.." << tag_ub_ << " (MPI_TAG_UB)";
}

namespace {

ByteSpan span_of(const Tensor& t) {
  if (!t.defined()) return {};
  const char* begin = static_cast<const char*>(t.raw_data());
  return {begin, begin + t.numel() * dtype_size(t.dtype())};
}

void set_chunks(MpiOp& op, int64_t n, int size) {
  op.counts.resize(size);
  op.displs.resize(size);
  for (int r = 0; r < size; ++r) {
    Chunk c = chunk_of(n, size, r);
    op.counts[r] = static_cast<int>(c.end - c.begin);
    op.displs[r] = static_cast<int>(c.begin);
  }
}

// Whether the bytes of a and b overlap (false when either is empty).
bool overlaps(const Tensor& a, const Tensor& b) {
  return a.numel() > 0 && b.numel() > 0 && span_of(a).overlaps(span_of(b));
}

// gather's or scatter's checks on root (after check_peer); `whole` is the tensor of size()
// blocks that only root has.
void check_blocks(const ProcessGroup& group, const char* op, const Tensor& whole, const char* whole_name,
                  const Tensor& part, const char* part_name, int root) {
  if (group.rank() != root) return;
  DPT_CHECK(whole.dtype() == part.dtype())
      << op << " on " << group.name() << ": " << whole_name << " is " << dtype_name(whole.dtype()) << " but "
      << part_name << " is " << dtype_name(part.dtype());
  DPT_CHECK(whole.numel() == group.size() * part.numel())
      << op << " on " << group.name() << ": root " << root << "'s " << whole_name << " must hold "
      << group.size() << " x " << part.numel() << " = " << group.size() * part.numel()
      << " elements (a block of " << part_name << "'s size per rank), got " << whole.numel();
  DPT_CHECK(!overlaps(whole, part)) << op << " on " << group.name() << ": out overlaps in";
}

// One side of all_to_all: `splits` (empty: equal) of n elements, checked.
void layout_side(const ProcessGroup& group, const char* what, const std::vector<int64_t>& splits, int64_t n,
                 std::vector<int64_t>& counts, std::vector<int64_t>& offsets) {
  const int size = group.size();
  if (splits.empty()) {
    DPT_CHECK(n % size == 0) << "all_to_all on " << group.name() << ": " << what << " has " << n
                             << " elements, which do not split equally over " << size
                             << " ranks (pass the splits)";
    counts.assign(size, n / size);
  } else {
    DPT_CHECK(static_cast<int>(splits.size()) == size)
        << "all_to_all on " << group.name() << ": " << splits.size() << " " << what
        << " splits for a group of " << size << " ranks (one per rank)";
    for (int r = 0; r < size; ++r)
      DPT_CHECK(splits[r] >= 0) << "all_to_all on " << group.name() << ": " << what << " split " << r
                                << " is " << splits[r] << " (must be >= 0)";
    const int64_t total = std::accumulate(splits.begin(), splits.end(), int64_t{0});
    DPT_CHECK(total == n) << "all_to_all on " << group.name() << ": the " << what << " splits add up to "
                          << total << " elements, but " << what << " has " << n;
    counts = splits;
  }
  offsets.assign(size, 0);
  for (int r = 1; r < size; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
}

// all_to_all's blocks, from the splits (empty: equal), checked against the requirements
// that one rank can check.
AllToAllLayout all_to_all_layout(const ProcessGroup& group, const Tensor& out, const Tensor& in,
                                 const std::vector<int64_t>& out_splits,
                                 const std::vector<int64_t>& in_splits) {
  DPT_CHECK(in.dtype() == out.dtype()) << "all_to_all on " << group.name() << ": out is "
                                       << dtype_name(out.dtype()) << " but in is " << dtype_name(in.dtype());
  DPT_CHECK(!overlaps(in, out)) << "all_to_all on " << group.name() << ": out overlaps in";
  AllToAllLayout layout;
  layout_side(group, "out", out_splits, out.numel(), layout.out_counts, layout.out_offsets);
  layout_side(group, "in", in_splits, in.numel(), layout.in_counts, layout.in_offsets);
  const int me = group.rank();
  DPT_CHECK(layout.in_counts[me] == layout.out_counts[me])
      << "all_to_all on " << group.name() << ": rank " << me << " sends itself " << layout.in_counts[me]
      << " elements (in split " << me << ") but expects " << layout.out_counts[me] << " (out split " << me
      << ")";
  return layout;
}

// The device a call runs on: its first defined tensor's (CPU for none).
Device device_of(const Tensor& a, const Tensor& b = Tensor()) {
  if (a.defined()) return a.device();
  return b.defined() ? b.device() : Device::cpu();
}

}  // namespace

std::shared_ptr<MpiOp> MpiProcessGroup::make_op(OpKind kind, const Tensor& out, const Tensor& in, int64_t n,
                                                ReduceOp reduce, int peer) const {
  auto op = std::make_shared<MpiOp>();
  op->kind = kind;
  op->comm = comm_;
  op->group_name = &name();
  op->group_size = size();
  op->rank = rank();
  op->out = out;
  op->in = in;
  op->writes = span_of(out);
  op->reads = span_of(in);
  op->dtype = out.defined() ? out.dtype() : in.defined() ? in.dtype() : DType::f32;
  op->n = n;
  op->reduce = reduce;
  op->peer = peer;
  return op;
}

bool MpiProcessGroup::use_hierarchy(const Tensor& t, bool bf16) const {
  if (!host_groups_.across || t.numel() == 0) return false;
  if (bf16) return true;
  switch (hierarchical_.load()) {
    case Hierarchical::on:
      return true;
    case Hierarchical::off:
      return false;
    case Hierarchical::automatic:
      return host_groups_.host != nullptr;
  }
  return false;
}

WorkPtr MpiProcessGroup::all_reduce_as(const Tensor& t, ReduceOp op, bool bf16) {
  count_collective(t);
  check_tensor("all_reduce", t, "the tensor", device_of(t));
  check_reduce("all_reduce", t, op);
  auto task = make_op(OpKind::all_reduce, t, Tensor(), t.numel(), op);
  if (t.device().is_cuda()) return post_nccl(task, t, [&](DeviceCollectives& b) { return b.all_reduce(t, op); });
  bf16 = bf16 && t.dtype() == DType::f32 && (op == ReduceOp::sum || op == ReduceOp::avg);
  if (use_hierarchy(t, bf16)) {
    task->hierarchical = std::make_unique<HierarchicalAllReduce>(host_groups_, t, op, bf16, size());
    task->scratch = {&hierarchy_token_, &hierarchy_token_ + 1};  // its sub-groups' calls must not interleave
    return post(std::move(task));
  }
  const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
  const bool small = shm_ && bytes <= shm_->bytes() / 2;
  // In a collective_buffer the in-place path needs two meetings of the ranks (arrived,
  // reduced) and the small-message one a copy and one meeting: below ~4 KB the copy is cheaper.
  if (!small || bytes > kCopyBelowBytes) share_buffer(*task, t);
  if (!task->shared && small) {
    task->shm = shm_.get();
    task->scratch = {shm_->control_begin(), shm_->control_end()};
  }
  return post(std::move(task));
}

Tensor MpiProcessGroup::collective_buffer(int64_t numel, DType dtype, Device device) {
  const size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  std::shared_ptr<ShmBuffer> buffer;
  if (device.is_cpu() && on_one_node_ && numel > 0) {
    const char* off = std::getenv("DPT_SHM_BUFFERS");
    buffer = ShmBuffer::create(creation_comm(), bytes, !off || std::strcmp(off, "0") != 0);
  }
  if (!buffer) return ProcessGroup::collective_buffer(numel, dtype, device);
  {
    std::lock_guard<std::mutex> lock(buffers_mutex_);
    std::erase_if(buffers_, [](const std::weak_ptr<ShmBuffer>& b) { return b.expired(); });
    buffers_.push_back(buffer);
  }
  char* data = buffer->data();
  return Tensor::wrap(std::make_shared<Storage>(data, bytes, Device::cpu(), std::move(buffer)), {numel},
                      dtype);
}

void MpiProcessGroup::share_buffer(MpiOp& task, const Tensor& t) {
  const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(buffers_mutex_);
  for (const auto& weak : buffers_) {
    std::shared_ptr<ShmBuffer> buffer = weak.lock();
    if (!buffer || !buffer->contains(t.raw_data(), bytes)) continue;
    task.shared_offset = static_cast<size_t>(static_cast<const char*>(t.raw_data()) - buffer->data());
    task.scratch = {buffer->control_begin(), buffer->control_end()};
    task.shared = std::move(buffer);
    return;
  }
}

WorkPtr MpiProcessGroup::broadcast(const Tensor& t, int root) {
  count_collective(t);
  check_tensor("broadcast", t, "the tensor", device_of(t), true);
  check_peer("broadcast", "root", root);
  auto task = make_op(OpKind::broadcast, t, Tensor(), t.numel(), ReduceOp::sum, root);
  if (t.device().is_cuda()) return post_nccl(task, t, [&](DeviceCollectives& b) { return b.broadcast(t, root); });
  return post(std::move(task));
}

WorkPtr MpiProcessGroup::all_gather(const Tensor& out, const Tensor& in) {
  count_collective(out, in);
  const Device device = device_of(out);
  check_tensor("all_gather", out, "out", device, true);
  check_tensor("all_gather", in, "in", device, true);
  DPT_CHECK(in.dtype() == out.dtype()) << "all_gather on " << name() << ": out is " << dtype_name(out.dtype())
                                       << " but in is " << dtype_name(in.dtype());
  const int64_t n = out.numel();
  const Chunk mine = chunk_of(n, size(), rank());
  DPT_CHECK(in.numel() == mine.end - mine.begin)
      << "all_gather on " << name() << ": out has " << n << " elements, so rank " << rank()
      << "'s in must have " << mine.end - mine.begin << " (chunk_of), got " << in.numel();
  auto task = make_op(OpKind::all_gather, out, in, n);
  const char* own_chunk = static_cast<const char*>(out.raw_data()) + mine.begin * dtype_size(out.dtype());
  task->in_place = in.numel() > 0 && in.raw_data() == own_chunk;
  DPT_CHECK(task->in_place || !overlaps(in, out))
      << "all_gather on " << name() << ": in overlaps out other than as rank " << rank()
      << "'s own chunk (elements " << mine.begin << ".." << mine.end << ")";
  if (device.is_cuda()) return post_nccl(task, out, [&](DeviceCollectives& b) { return b.all_gather(out, in); });
  set_chunks(*task, n, size());
  share_buffer(*task, out);
  return post(std::move(task));
}

WorkPtr MpiProcessGroup::reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) {
  count_collective(out, in);
  const Device device = device_of(out);
  check_tensor("reduce_scatter", out, "out", device);
  check_tensor("reduce_scatter", in, "in", device);
  check_reduce("reduce_scatter", in, op);
  DPT_CHECK(in.dtype() == out.dtype()) << "reduce_scatter on " << name() << ": out is "
                                       << dtype_name(out.dtype()) << " but in is " << dtype_name(in.dtype());
  const int64_t n = in.numel();
  const Chunk mine = chunk_of(n, size(), rank());
  DPT_CHECK(out.numel() == mine.end - mine.begin)
      << "reduce_scatter on " << name() << ": in has " << n << " elements, so rank " << rank()
      << "'s out must have " << mine.end - mine.begin << " (chunk_of), got " << out.numel();
  DPT_CHECK(!overlaps(in, out)) << "reduce_scatter on " << name() << ": out overlaps in";
  auto task = make_op(OpKind::reduce_scatter, out, in, n, op);
  if (device.is_cuda())
    return post_nccl(task, out, [&](DeviceCollectives& b) { return b.reduce_scatter(out, in, op); });
  set_chunks(*task, n, size());
  share_buffer(*task, in);
  return post(std::move(task));
}

WorkPtr MpiProcessGroup::reduce(const Tensor& t, int root, ReduceOp op) {
  count_collective(t);
  check_tensor("reduce", t, "the tensor", device_of(t));
  check_reduce("reduce", t, op);
  check_peer("reduce", "root", root);
  auto task = make_op(OpKind::reduce, t, Tensor(), t.numel(), op, root);
  if (rank() != root) std::swap(task->reads, task->writes);  // only read there
  if (t.device().is_cuda()) return post_nccl(task, t, [&](DeviceCollectives& b) { return b.reduce(t, root, op); });
  return post(std::move(task));
}

WorkPtr MpiProcessGroup::gather(const Tensor& out, const Tensor& in, int root) {
  count_collective(out, in);
  const Device device = device_of(in);
  check_tensor("gather", in, "in", device, true);
  check_peer("gather", "root", root);
  if (rank() == root) check_tensor("gather", out, "out", device, true);
  check_blocks(*this, "gather", out, "out", in, "in", root);
  auto task = make_op(OpKind::gather, rank() == root ? out : Tensor(), in, in.numel(), ReduceOp::sum, root);
  if (device.is_cuda()) return post_nccl(task, in, [&](DeviceCollectives& b) { return b.gather(out, in, root); });
  return post(std::move(task));
}

WorkPtr MpiProcessGroup::scatter(const Tensor& out, const Tensor& in, int root) {
  count_collective(out, in);
  const Device device = device_of(out);
  check_tensor("scatter", out, "out", device, true);
  check_peer("scatter", "root", root);
  if (rank() == root) check_tensor("scatter", in, "in", device, true);
  check_blocks(*this, "scatter", in, "in", out, "out", root);
  auto task = make_op(OpKind::scatter, out, rank() == root ? in : Tensor(), out.numel(), ReduceOp::sum, root);
  if (device.is_cuda()) return post_nccl(task, out, [&](DeviceCollectives& b) { return b.scatter(out, in, root); });
  return post(std::move(task));
}

WorkPtr MpiProcessGroup::all_to_all(const Tensor& out, const Tensor& in,
                                    const std::vector<int64_t>& out_splits,
                                    const std::vector<int64_t>& in_splits) {
  count_collective(out, in);
  const Device device = device_of(out);
  check_tensor("all_to_all", out, "out", device, true);
  check_tensor("all_to_all", in, "in", device, true);
  const AllToAllLayout layout = all_to_all_layout(*this, out, in, out_splits, in_splits);
  auto task = make_op(OpKind::all_to_all, out, in, 0);
  // Each count and offset is at most numel() <= INT_MAX (check_tensor).
  auto as_int = [](const std::vector<int64_t>& v) { return std::vector<int>(v.begin(), v.end()); };
  task->counts = as_int(layout.out_counts);
  task->displs = as_int(layout.out_offsets);
  task->in_counts = as_int(layout.in_counts);
  task->in_displs = as_int(layout.in_offsets);
  if (device.is_cuda())
    return post_nccl(task, out, [&](DeviceCollectives& b) { return b.all_to_all(out, in, layout); }, &layout);
  return post(std::move(task), &layout);
}

WorkPtr MpiProcessGroup::barrier() {
  count_collective();
  return post(make_op(OpKind::barrier, Tensor(), Tensor(), 0));
}

std::shared_ptr<MpiOp> MpiProcessGroup::make_message(const P2POp& m) {
  const char* op = m.send ? "send" : "recv";
  const char* what = m.send ? "dst" : "src";
  check_tensor(op, m.tensor, "the tensor", device_of(m.tensor), true);
  check_peer(op, what, m.peer);
  DPT_CHECK(m.peer != rank()) << op << " on " << name() << ": " << what << " " << m.peer << " is this rank";
  check_tag(op, m.tag);
  DPT_CHECK(m.tag == 0 || !m.tensor.device().is_cuda())
      << op << " on " << name() << " (NCCL): tag " << m.tag << "; NCCL has no tags, use 0";
  const OpKind kind = m.send ? OpKind::send : OpKind::recv;
  auto task = make_op(kind, m.tensor, Tensor(), m.tensor.numel(), ReduceOp::sum, m.peer);
  if (m.send) std::swap(task->reads, task->writes);  // only read
  task->tag = m.tag;
  return task;
}

WorkPtr MpiProcessGroup::send(const Tensor& t, int dst, int tag) {
  return batch_send_recv({{true, t, dst, tag}}).front();
}

WorkPtr MpiProcessGroup::recv(const Tensor& t, int src, int tag) {
  return batch_send_recv({{false, t, src, tag}}).front();
}

std::vector<WorkPtr> MpiProcessGroup::batch_send_recv(const std::vector<P2POp>& ops) {
  // Every check before any message starts.
  std::vector<std::shared_ptr<MpiOp>> messages;
  std::vector<P2POp> on_gpu;
  size_t first_gpu = 0;  // its message describes the NCCL group
  for (size_t i = 0; i < ops.size(); ++i) {
    messages.push_back(make_message(ops[i]));
    if (!ops[i].tensor.device().is_cuda()) continue;
    DPT_CHECK(on_gpu.empty() || ops[i].tensor.device() == on_gpu.front().tensor.device())
        << "batch_send_recv on " << name() << ": messages on " << on_gpu.front().tensor.device().str() << " and "
        << ops[i].tensor.device().str() << " (one device per rank)";
    if (on_gpu.empty()) first_gpu = i;
    on_gpu.push_back(ops[i]);
  }
  std::vector<WorkPtr> works(ops.size());
  for (size_t i = 0; i < ops.size(); ++i)
    if (!ops[i].tensor.device().is_cuda()) works[i] = post(messages[i]);
  if (on_gpu.empty()) return works;
  // One NCCL group, one Work for all its messages.
  WorkPtr grouped = post_nccl(messages[first_gpu], on_gpu.front().tensor,
                              [&](DeviceCollectives& b) { return b.send_recv(on_gpu); });
  for (WorkPtr& w : works)
    if (!w) w = grouped;
  return works;
}

}  // namespace dpt::dist
