// Process start-up and the ways to make groups. Groups are made collectively: every rank
// of the parent calls the same function in the same order (as in MPI and PyTorch), on the
// calling thread, from a second communicator of the parent that no collective uses: making
// one needs no ordering against collectives in flight (comm_thread.h runs those).
#pragma once

#include <string>
#include <vector>

#include "comm/hierarchical.h"
#include "comm/process_group.h"

namespace dpt::dist {

// Where this rank runs. A host is what MPI_COMM_TYPE_SHARED calls a node: the ranks that
// Open MPI started through one daemon (one per line of a hostfile). Ranks of one host share
// memory (shm_buffer.h); ranks of different hosts never do, even where hosts share a /dev/shm
// (tools/cluster.sh's namespaces).
struct InitInfo {
  int rank = 0, world_size = 1;
  int local_rank = 0, local_size = 1;  // among the ranks of this rank's host, in rank order
  int node = 0, node_count = 1;        // hosts numbered by their lowest rank: rank 0's is 0
  std::string host;                    // this host's name (gethostname)
};

// Initialises MPI (MPI_Init_thread, asking for MPI_THREAD_MULTIPLE), under mpirun or as a
// single process, and makes world(). Idempotent. Throws Error after finalize() (MPI cannot
// restart) or when MPI grants less than MPI_THREAD_SERIALIZED. Under SERIALIZED (or with
// DPT_MPI_THREAD_LEVEL=serialized) every MPI call dpt makes takes one process-wide mutex.
// If MPI was initialised by someone else, dpt uses it and leaves MPI_Finalize to them.
// Before MPI_Init_thread it sets OMPI_MCA_coll_libnbc_iallreduce_algorithm=3 unless the
// environment sets it (Open MPI's default for in-place MPI_Iallreduce is 2x slower).
// Environment: DPT_DIST_TIMEOUT_S (Work::wait() timeout), DPT_DIST_DEBUG=collectives (see
// set_debug_collectives), DPT_MPI_THREAD_LEVEL.
// Faults (fatal.h): when dpt initialised MPI, MPI errors are returned as dpt::Error rather
// than ending the job from inside MPI; a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
// SIGABRT) prints "[rank R] fatal signal ..." before the usual handling ends the process, and
// an uncaught exception ends every rank through abort_all() with its message.
const InitInfo& init();
bool initialized();  // init() done and finalize() not yet
// Lets every group's queued collectives complete, stops their communication, frees
// the communicators and ends MPI; the groups must not be used afterwards (their collectives
// throw Error). Safe to call twice; registered with std::atexit by init(), so a normal exit
// without it neither hangs nor crashes (unless a collective is left that other ranks never
// call: then it waits like MPI_Finalize would, or aborts after DPT_DIST_TIMEOUT_S).
void finalize();
// Ends every rank at once (MPI_Abort) with `code` after printing `message` on stderr,
// prefixed with the rank. Used when one rank fails so the others cannot hang.
[[noreturn]] void abort_all(const std::string& message, int code);

// For every group, those that exist and those made later (MpiProcessGroup's setters).
// set_timeout: seconds >= 0, 0 waits forever. Every rank must agree. requires: init() (else Error).
void set_timeout(double seconds);
void set_debug_collectives(bool on);
void set_hierarchical(Hierarchical mode);

const InitInfo& info();  // requires init() (else Error)
GroupPtr world();        // requires init() (else Error)
// The sum of counts() over the groups this rank is a member of that are still alive: the
// collectives this rank has called on any of them, and their bytes. requires: init() (else Error).
CollectiveCounts collective_counts();

// A group of the given world ranks (strictly increasing). Collective over the world.
// Returns nullptr on ranks that are not members. Named "group[0,2]". Throws Error (on every
// rank) when ranks is empty, unsorted, repeats or is out of range, or differs between ranks.
GroupPtr new_group(const std::vector<int>& ranks);
// Splits `parent` by colour: ranks with equal colour form a group, ordered by (key, rank).
// Collective over the parent. colour < 0 gives nullptr (no group). Named "split(color 1)[1,3]"
// (world ranks). requires: parent non-null (a member) and an MPI group.
GroupPtr split(const GroupPtr& parent, int color, int key);

// Where a group is required: returns *group when this rank is a member (group non-null),
// else throws Error "rank 1 is not a member of <what>" (what: "group[0,2]", "the DDP group").
ProcessGroup& require_member(const GroupPtr& group, const std::string& what);

// Collective over `group`: every rank's `text`, in rank order, on every rank (the lengths,
// then the bytes packed eight to an i64 element: the collectives move numbers).
std::vector<std::string> gather_text(const std::string& text, ProcessGroup& group);

// A world of prod(shape) ranks laid out row-major over named axes: for shape {2, 4} and
// names {"dp", "tp"}, rank r has coordinates (r / 4, r % 4), and its "tp" group holds the
// 4 ranks sharing its dp coordinate. Collective over the world; requires prod(shape) ==
// world size. Axis groups are named "mesh.dp[0,4]" (world ranks).
class DeviceMesh {
 public:
  DeviceMesh(std::vector<int> shape, std::vector<std::string> names);
  const std::vector<int>& shape() const { return shape_; }
  const std::vector<int>& coordinates() const { return coordinates_; }  // of this rank
  // The group along `axis` (by name) containing this rank; Error for an unknown name.
  GroupPtr group(const std::string& axis) const;

 private:
  std::vector<int> shape_, coordinates_;
  std::vector<std::string> names_;
  std::vector<GroupPtr> groups_;
};

}  // namespace dpt::dist
