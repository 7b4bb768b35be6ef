// The process group: the front end that checks, numbers, records and (in debug mode)
// compares every call across ranks, whichever backend runs it, and the MPI backend for CPU
// tensors; CUDA tensors go to the group's DeviceCollectives (device_collectives.h: NCCL), held to the same
// timeout by the process watchdog (watchdog.h). Each group owns a communicator for its
// collectives, a second one from which sub-groups are made, a ControlChannel
// (control_channel.h) that numbers its collectives and explains a timeout, and a CommThread
// (comm_thread.h) that runs the collectives as nonblocking MPI calls in call order: started
// by the caller when the group's poll token is free, polled by a caller in wait(), and
// otherwise by the group's communication thread in the background.
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


class ShmSegment;
class ShmBuffer;

struct MpiOp;

class MpiProcessGroup final : public ProcessGroup {
 public:
  // All-reduces up to this many bytes go through shared memory when every rank of the
  // group is on this machine (shm_all_reduce.h; DPT_SHM_ALLREDUCE_BYTES overrides).
  static constexpr size_t kShmAllReduceBytes = 64 * 1024;
  // Parts of a collective_buffer up to this size take that small-message path too (a copy
  // and one meeting of the ranks beat the in-place path's two meetings there).
  static constexpr size_t kCopyBelowBytes = 4096;

  // Collective over `comm`. requires: MPI initialised; `comm` a communicator nobody else
  // uses; world_ranks[r] the MPI_COMM_WORLD rank of comm's rank r (comm_world_ranks()).
  // ensures: the group owns `comm` (frees it in shutdown()); group rank == comm rank.
  MpiProcessGroup(MPI_Comm comm, std::vector<int> world_ranks, std::string name);
  ~MpiProcessGroup() override;  // shutdown()

  // CUDA tensors go to this group's NCCL backend (nccl_backend.h; CUDA builds), made
  // collectively on the first CUDA collective or by split(); the ordering promises below
  // hold among the collectives of one backend. Collectives of both backends share one
  // numbering (#1, #2, ...), one flight ring, the debug check and the timeout: an NCCL
  // collective not complete within the timeout, or one NCCL reports failed, ends the job
  // through the process watchdog with the same message an MPI one throws from wait().
  // Each collective checks its arguments here, on the calling thread, and throws Error
  // naming the group, the op and what was expected; errors MPI reports later are rethrown
  // by Work::wait(). Collectives start in call order and complete in call order: when a
  // Work's wait() returns, every earlier Work of this group is complete too. 0 elements is
  // fine (no MPI call, still ordered; all_to_all calls MPI all the same, as its counts are
  // each rank's own). avg on i64 divides with truncation toward zero (reduce: on root).
  // all_reduce is hierarchical (hierarchical.h) when the group has host groups and the mode
  // asks for it (set_hierarchical), or when `compress` is bf16 and the tensor is f32 with sum
  // or avg; else flat: shared memory on one host, MPI otherwise. Each call counts in counts()
  // as it is made, whichever backend runs it (a hierarchical one once, not its stages: those
  // count in its sub-groups).
  WorkPtr all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) override {
    return all_reduce(t, op, Compression::none);
  }
  WorkPtr all_reduce(const Tensor& t, ReduceOp op, Compression compress);
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

  // Collective over the group, right after it is made (dist.cpp does, with
  // dist::info().node): when its ranks span more than one node and every node holds the same
  // number of them, makes its host groups (HostGroups: sub-groups named "<name>.host[...]"
  // and "<name>.across[...]", owned by this group, shut down with it); otherwise notes why its
  // all_reduce stays flat. `node`: this rank's host index; a test may pass another to
  // simulate hosts on one machine (the host groups then meet in this machine's memory).
  // requires: no host groups yet (else Error).
  void make_host_groups(int node);
  // Empty `across` when the group has no host groups.
  const HostGroups& host_groups() const { return host_groups_; }
  // For the world table: "hierarchical all-reduce: 2 hosts x 2 ranks", "flat all-reduce: its
  // hosts hold 2 and 1 of its ranks", ... ; "" for a group on one host.
  std::string all_reduce_text() const;
  // Whether all_reduce goes hierarchical (see all_reduce). Default: automatic;
  // dist::set_hierarchical() sets it for every group. Every rank must use the same setting.
  void set_hierarchical(Hierarchical mode) { hierarchical_ = mode; }

  // The communicator that sub-groups are split from. Only group creation uses it (on the
  // calling thread), never a collective, so making a group needs no ordering against
  // collectives in flight on this group. requires: not shut down.
  MPI_Comm creation_comm() const;
  // Tuning, for benchmarks (PollPolicy in comm_thread.h).
  void set_poll_policy(const PollPolicy& policy) { thread_.set_poll_policy(policy); }
  // wait() throws Error after this long, naming the collective, its number in the group
  // (#1, #2, ...) and the ranks that did not call it or called it with other arguments
  // (ControlChannel::diagnose); 0 waits forever. Default: the environment variable
  // DPT_DIST_TIMEOUT_S (seconds), else 0; dist::set_timeout() sets it for every group. A
  // timed-out collective leaves the group unusable: the caller should report and abort_all().
  void set_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_.load()); }
  // Debug mode: before each collective (not send/recv) every rank of the group checks that all
  // of them call the same operation with the same reduce op, dtype, element count and root,
  // and the call throws Error on every rank naming the first rank that differs from rank 0
  // (ControlChannel::check_same); for all_to_all, that what each rank sends each other rank
  // is what that one expects from it (ControlChannel::check_counts). Costs a small all-gather per collective.
  // Default: on when the environment variable DPT_DIST_DEBUG is "collectives"; dist::set_debug_collectives()
  // sets it for every group. Every rank must use the same setting.
  void set_debug_collectives(bool on) { debug_collectives_ = on; }
  bool debug_collectives() const { return debug_collectives_; }

  // Lets the queued collectives complete (abort_all() if they are not complete within the
  // timeout, when one is set), stops the thread and frees the communicators (the
  // NCCL backend's too); afterwards every collective throws Error. Idempotent; dist::finalize()
  // calls it on every group.
  void shutdown();

  // Makes child's NCCL backend by splitting this group's (ncclCommSplit), when this group has
  // one; collective over this group (child null on non-members). No-op in CPU builds.
  void split_nccl(int color, int key, MpiProcessGroup* child);

 private:
  // The NCCL backend for t's device, made on first use (collective over this group).
  DeviceCollectives& nccl(const Tensor& t);

  WorkPtr post(std::shared_ptr<CommTask> task);
  // Numbers a collective, records it in the flight ring and checks it in debug mode
  // (all_to_all's counts too, from its layout): the front end's part of every collective.
  void announce(MpiOp& call, const AllToAllLayout* layout);
  // announce(), then post to the MPI backend.
  WorkPtr post_collective(std::shared_ptr<MpiOp> task, const AllToAllLayout* layout = nullptr);
  // A CUDA call: announce() (collectives only), launch it on the NCCL backend of `t`'s device,
  // and hand its Work to the process watchdog.
  WorkPtr post_nccl(std::shared_ptr<MpiOp> call, const Tensor& t, const std::function<WorkPtr(DeviceCollectives&)>& launch,
                    const AllToAllLayout* layout = nullptr);
  // Every tensor of a call: defined, contiguous and on `device` (the call's). On the CPU
  // (MPI): f32 or i64 (bf16 too where `moves_only`: collectives that copy and never reduce),
  // at most INT_MAX elements. On CUDA (NCCL): f32, bf16, f16 or i64.
  void check_tensor(const char* op, const Tensor& t, const char* what, Device device, bool moves_only = false) const;
  // avg of integers: MPI truncates, NCCL refuses.
  void check_reduce(const char* op, const Tensor& t, ReduceOp reduce) const;
  bool use_hierarchy(const Tensor& t, ReduceOp op, Compression compress) const;
  std::vector<MpiProcessGroup*> sub_groups() const;  // host_groups_'s
  void check_peer(const char* op, const char* what, int peer) const;
  // One message of send(), recv() or batch_send_recv(), checked and described.
  std::shared_ptr<MpiOp> make_message(const P2POp& m);
  void check_tag(const char* op, int tag) const;
  // The live collective_buffer holding [data, data + bytes), or null.
  std::shared_ptr<ShmBuffer> shared_buffer_of(const void* data, size_t bytes);
  // When `t` lies in a collective_buffer: the task goes through it (ShmBuffer), not MPI.
  void share_buffer(MpiOp& task, const Tensor& t);

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
  std::unique_ptr<ShmSegment> shm_;  // null: MPI does every small all-reduce
  std::mutex buffers_mutex_;
  std::vector<std::weak_ptr<ShmBuffer>> buffers_;  // handed out by collective_buffer
  HostGroups host_groups_;
  std::string flat_reason_;  // why a group across hosts has no host groups
  std::atomic<Hierarchical> hierarchical_{Hierarchical::automatic};
  char hierarchy_token_ = 0;  // the scratch of hierarchical all-reduces: one at a time
  CommThread thread_;
  std::mutex nccl_mutex_;
  std::shared_ptr<DeviceCollectives> nccl_;  // stays null in CPU builds
};

// dist's groups (dist.cpp), typed: what split() and the world table use beyond
// ProcessGroup. live_mpi_groups: those alive, world first (dist::live_groups()); requires
// dist::init(). made_by_dist: `group` itself when dist made it and it is alive, else null
// (a wrapper of a group, or none).
std::vector<std::shared_ptr<MpiProcessGroup>> live_mpi_groups();
std::shared_ptr<MpiProcessGroup> made_by_dist(const ProcessGroup* group);

// MPI_COMM_WORLD rank of each rank of `comm` (MPI_Group_translate_ranks).
std::vector<int> comm_world_ranks(MPI_Comm comm);
// "[0,2,3]"
std::string ranks_str(const std::vector<int>& ranks);

}  // namespace dpt::dist
