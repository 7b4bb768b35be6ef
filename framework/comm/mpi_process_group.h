// The process group: the front end that checks, numbers, records and (in debug mode)
// compares every call across ranks, whichever backend runs it, and the MPI backend for CPU
// tensors; CUDA tensors go to the group's DeviceCollectives (NCCL), held to the same timeout
// by the process watchdog (watchdog.h). Each group owns a communicator for its collectives,
// a second one from which sub-groups are made, a ControlChannel (control_channel.h) that
// numbers its collectives and explains a timeout, and a CommQueue (comm_thread.h) that runs
// the collectives as nonblocking MPI calls in call order, with the process's one
// communication thread progressing them.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/control_channel.h"
#include "comm/device_collectives.h"
#include "comm/flight_recorder.h"
#include "comm/hierarchical.h"
#include "comm/process_group.h"

namespace dpt::dist {

class ShmBuffer;
struct MpiOp;
enum class OpKind;

class MpiProcessGroup final : public ProcessGroup {
 public:
  // All-reduces up to this many bytes go through shared memory when every rank of the
  // group is on this machine (shm_buffer.h; DPT_SHM_ALLREDUCE_BYTES overrides).
  static constexpr size_t kShmAllReduceBytes = 64 * 1024;
  // Parts of a collective_buffer up to this size take that small-message path too (a copy
  // and one meeting of the ranks beat the in-place path's two meetings there).
  static constexpr size_t kCopyBelowBytes = 4096;

  // Collective over `comm`. requires: MPI initialised; `comm` a communicator nobody else
  // uses; world_ranks[r] the MPI_COMM_WORLD rank of comm's rank r (comm_world_ranks()).
  // ensures: the group owns `comm` (frees it in shutdown()); group rank == comm rank.
  MpiProcessGroup(MPI_Comm comm, std::vector<int> world_ranks, std::string name);
  ~MpiProcessGroup() override;  // shutdown()

  // CUDA tensors go to this group's NCCL backend, made collectively on the first CUDA
  // collective or by split(); the ordering promises hold among the collectives of one
  // backend. Both backends share one numbering (#1, #2, ...), one flight ring, the debug
  // check and the timeout: an NCCL collective not complete in time, or failed, ends the job
  // through the process watchdog with the message an MPI one throws from wait(). Arguments are
  // checked on the calling thread (Error naming the group, the op and what was expected);
  // errors MPI reports later are rethrown by wait(). 0 elements is fine (no MPI call, still
  // ordered; all_to_all calls MPI all the same). avg on i64 truncates toward zero (reduce: on
  // root). all_reduce is hierarchical (hierarchical.h) when the group has host groups and
  // set_hierarchical asks for it, or for all_reduce_bf16_across_hosts (f32 sum or avg); else
  // flat: shared memory on one host, MPI otherwise. Each call counts once in counts(), on
  // any backend (a hierarchical one's stages count in its sub-groups).
  WorkPtr all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) override {
    return all_reduce_as(t, op, false);
  }
  WorkPtr broadcast(const Tensor& t, int root) override;
  WorkPtr all_gather(const Tensor& out, const Tensor& in) override;
  WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum) override;
  WorkPtr reduce(const Tensor& t, int root, ReduceOp op = ReduceOp::sum) override;
  WorkPtr gather(const Tensor& out, const Tensor& in, int root) override;
  WorkPtr scatter(const Tensor& out, const Tensor& in, int root) override;
  WorkPtr all_to_all(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_splits = {},
                     const std::vector<int64_t>& in_splits = {}) override;
  WorkPtr barrier() override;
  // Point to point; requires peer != rank(), 0 <= tag <= MPI_TAG_UB. recv checks that the
  // message had exactly t.numel() elements.
  WorkPtr send(const Tensor& t, int dst, int tag = 0) override;
  WorkPtr recv(const Tensor& t, int src, int tag = 0) override;
  // CPU messages as send() and recv(); CUDA ones in one NCCL group, one Work for them all.
  std::vector<WorkPtr> batch_send_recv(const std::vector<P2POp>& ops) override;
  // CPU memory every rank maps, when the group's ranks share this machine (shm_buffer.h;
  // DPT_SHM_BUFFERS=0 on any rank turns it off): all_reduce of any part of it is one pass
  // over shared memory instead of MPI. Otherwise ordinary memory.
  Tensor collective_buffer(int64_t numel, DType dtype, Device device) override;

  // Collective over the group, right after it is made (dist.cpp, with dist::info().node):
  // when its ranks span several nodes, each holding as many, makes its host groups
  // ("<name>.host[...]" and "<name>.across[...]", owned and shut down by this group);
  // otherwise notes why its all_reduce stays flat. A test may pass another `node` to
  // simulate hosts on one machine. requires: no host groups yet (else Error).
  void make_host_groups(int node);
  // Empty `across` when the group has no host groups.
  const HostGroups& host_groups() const { return host_groups_; }
  // For the world table: "hierarchical all-reduce: 2 hosts x 2 ranks", "flat all-reduce: its
  // hosts hold 2 and 1 of its ranks", ... ; "" for a group on one host.
  std::string all_reduce_text() const;
  // Whether all_reduce goes hierarchical; default automatic. The same on every rank.
  void set_hierarchical(Hierarchical mode) { hierarchical_ = mode; }

  // The communicator that sub-groups are split from, on the calling thread: no collective
  // uses it, so making a group needs no ordering against them. requires: not shut down.
  MPI_Comm creation_comm() const;
  // Tuning, for benchmarks (PollPolicy in comm_thread.h): for every group of the process.
  void set_poll_policy(const PollPolicy& policy) { queue_.set_poll_policy(policy); }
  // wait() throws Error after this long, naming the collective, its number and the ranks
  // that did not call it or called it otherwise (ControlChannel::diagnose); 0 waits forever.
  // Default: DPT_DIST_TIMEOUT_S (seconds), else 0. A timed-out collective leaves the group
  // unusable: the caller should report and abort_all().
  void set_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_.load()); }
  // Debug mode: before each collective (not send/recv) the ranks check that they all make the
  // same call (ControlChannel::check_same; all_to_all's splits too: check_counts), else the
  // call throws Error on every rank naming the first rank that differs from rank 0. Costs a
  // small all-gather per collective. Default: on when DPT_DIST_DEBUG is "collectives". The
  // same on every rank.
  void set_debug_collectives(bool on) { debug_collectives_ = on; }

  // Lets the queued collectives complete (abort_all() if not within the timeout, when one is
  // set), stops the thread, frees the communicators (the NCCL backend's too); afterwards
  // every collective throws Error. Idempotent; dist::finalize() calls it on every group.
  void shutdown();

  // Makes child's NCCL backend by splitting this group's (ncclCommSplit), when this group has
  // one; collective over this group (child null on non-members). No-op in CPU builds.
  void split_nccl(int color, int key, MpiProcessGroup* child);

 private:
  // The NCCL backend for t's device, made on first use (collective over this group).
  DeviceCollectives& nccl(const Tensor& t);

  // Refuses a call after shutdown; numbers a collective (not send/recv), records it in the
  // flight ring and checks it in debug mode (all_to_all's counts too, from its layout).
  void announce(MpiOp& call, const AllToAllLayout* layout);
  // announce(), then post to the MPI backend.
  WorkPtr post(std::shared_ptr<MpiOp> task, const AllToAllLayout* layout = nullptr);
  // A CUDA call: announce(), launch it on the NCCL backend of `t`'s device,
  // and hand its Work to the process watchdog.
  WorkPtr post_nccl(std::shared_ptr<MpiOp> call, const Tensor& t, const std::function<WorkPtr(DeviceCollectives&)>& launch,
                    const AllToAllLayout* layout = nullptr);
  // Every tensor of a call: defined, contiguous and on `device` (the call's). On the CPU
  // (MPI): f32 or i64 (bf16 too where `moves_only`: collectives that copy and never reduce),
  // at most INT_MAX elements. On CUDA (NCCL): f32, bf16, f16 or i64.
  void check_tensor(const char* op, const Tensor& t, const char* what, Device device, bool moves_only = false) const;
  // avg of integers: MPI truncates, NCCL refuses.
  void check_reduce(const char* op, const Tensor& t, ReduceOp reduce) const;
  friend WorkPtr all_reduce_bf16_across_hosts(ProcessGroup&, const Tensor&, ReduceOp);
  // all_reduce; bf16: f32 sum and avg go hierarchical with bf16 between hosts (the hook's).
  WorkPtr all_reduce_as(const Tensor& t, ReduceOp op, bool bf16);
  bool use_hierarchy(const Tensor& t, bool bf16) const;
  std::vector<MpiProcessGroup*> sub_groups() const;  // host_groups_'s
  void check_peer(const char* op, const char* what, int peer) const;
  // One message of send(), recv() or batch_send_recv(), checked and described.
  std::shared_ptr<MpiOp> make_message(const P2POp& m);
  void check_tag(const char* op, int tag) const;
  // When `t` lies in a live collective_buffer: the task goes through it (ShmBuffer), not MPI.
  void share_buffer(MpiOp& task, const Tensor& t);
  // A call writing `out` and reading `in` (either may be undefined); n: MpiOp::n.
  std::shared_ptr<MpiOp> make_op(OpKind kind, const Tensor& out, const Tensor& in, int64_t n,
                                 ReduceOp reduce = ReduceOp::sum, int peer = 0) const;

  MPI_Comm comm_ = MPI_COMM_NULL;      // the collectives' (called by the poll token's holder)
  MPI_Comm creation_ = MPI_COMM_NULL;  // sub-group creation only
  std::atomic<int64_t> timeout_ms_{0};
  std::atomic<bool> debug_collectives_{false};
  std::shared_ptr<ControlChannel> control_;  // shared with the watchdog's NCCL entries
  std::shared_ptr<FlightRing> flight_;  // its last collectives, for dumps (flight_recorder.h)
  int tag_ub_ = 32767;  // MPI_TAG_UB
  std::mutex shutdown_mutex_;
  std::atomic<bool> shut_down_{false};
  bool on_one_node_ = false;         // 2+ ranks, all on this machine: shared memory works
  std::shared_ptr<ShmBuffer> shm_;  // the small all-reduces' two halves; null: MPI does them
  std::mutex buffers_mutex_;
  std::vector<std::weak_ptr<ShmBuffer>> buffers_;  // handed out by collective_buffer
  HostGroups host_groups_;
  std::string flat_reason_;  // why a group across hosts has no host groups
  std::atomic<Hierarchical> hierarchical_{Hierarchical::automatic};
  char hierarchy_token_ = 0;  // the scratch of hierarchical all-reduces: one at a time
  CommQueue queue_;
  std::mutex nccl_mutex_;
  std::shared_ptr<DeviceCollectives> nccl_;  // stays null in CPU builds
};

// dist's groups (dist.cpp), typed. live_mpi_groups: those this rank is a member of that are
// alive, world first, then in the order they were made; requires dist::init(). made_by_dist:
// `group` itself when dist made it and it is alive, else null (a wrapper of a group, or none).
std::vector<std::shared_ptr<MpiProcessGroup>> live_mpi_groups();
std::shared_ptr<MpiProcessGroup> made_by_dist(const ProcessGroup* group);

// MPI_COMM_WORLD rank of each rank of `comm` (MPI_Group_translate_ranks).
std::vector<int> comm_world_ranks(MPI_Comm comm);
// "[0,2,3]"
std::string ranks_str(const std::vector<int>& ranks);

}  // namespace dpt::dist
