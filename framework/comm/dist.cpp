// Process start-up, the default group and group creation: the MPI state of the process
// (docs/design.md allows this one global), and the collective calls that make groups.
#include "comm/dist.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "core/error.h"
#include "comm/fatal.h"
#include "comm/flight_recorder.h"
#include "comm/mpi_check.h"
#include "comm/mpi_process_group.h"

namespace dpt::dist {
namespace {

struct State {
  std::mutex mutex;
  bool initialized = false, finalized = false;
  bool own_mpi = false;  // we called MPI_Init_thread, so we call MPI_Finalize
  InitInfo info;
  std::shared_ptr<MpiProcessGroup> world;
  std::vector<std::weak_ptr<MpiProcessGroup>> groups;  // every live group, for finalize()
  // Set by set_timeout() / set_debug_collectives(), for groups made later; unset: each
  // group's own default (the environment).
  std::optional<std::chrono::milliseconds> timeout;
  std::optional<bool> debug_collectives;
  std::optional<Hierarchical> hierarchical;
};

// The default process group and what MPI said at start-up: the one global state docs/design.md
// allows. Never destroyed, so nothing depends on the order of static destructors at exit.
State& state() {
  static State* s = new State;
  return *s;
}

std::atomic<int> g_rank{0};  // for abort_all() and messages, which must not take the mutex

void finalize_at_exit() {
  try {
    finalize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] dist::finalize() at exit: %s\n", g_rank.load(), e.what());
  }
}

int thread_level_requested() {
  const char* level = std::getenv("DPT_MPI_THREAD_LEVEL");
  if (!level || !*level || std::strcmp(level, "multiple") == 0) return MPI_THREAD_MULTIPLE;
  if (std::strcmp(level, "serialized") == 0) return MPI_THREAD_SERIALIZED;
  DPT_FAIL() << "DPT_MPI_THREAD_LEVEL must be 'multiple' or 'serialized', got '" << level << "'";
}

std::shared_ptr<MpiProcessGroup> world_checked(const char* what) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  DPT_CHECK(s.initialized) << what << " requires dist::init()"
                           << (s.finalized ? " (dist::finalize() has been called)" : "");
  return s.world;
}

GroupPtr make_group(MPI_Comm comm, const std::string& label) {
  std::vector<int> ranks = comm_world_ranks(comm);
  auto group = std::make_shared<MpiProcessGroup>(comm, ranks, label + ranks_str(ranks));
  group->make_host_groups(state().info.node);  // collective over the new group
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.timeout) group->set_timeout(*s.timeout);
  if (s.debug_collectives) group->set_debug_collectives(*s.debug_collectives);
  if (s.hierarchical) group->set_hierarchical(*s.hierarchical);
  std::erase_if(s.groups, [](const auto& g) { return g.expired(); });
  s.groups.push_back(group);
  return group;
}

// Throws the same Error on every rank of `group` when `value` is not the same everywhere.
void check_same_everywhere(MpiProcessGroup& group, uint64_t value, const std::string& what) {
  int64_t v = static_cast<int64_t>(value >> 1), both[2] = {v, -v};
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, both, 2, MPI_INT64_T, MPI_MIN, group.creation_comm()));
  DPT_CHECK(both[0] == -both[1]) << what << ": the ranks passed different arguments; every rank of "
                                 << group.name() << " must pass the same ones";
}

uint64_t hash_ints(const std::vector<int>& values) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (int v : values) h = (h ^ static_cast<uint32_t>(v)) * 1099511628211ull;
  return (h ^ values.size()) * 1099511628211ull;
}

GroupPtr split_named(const GroupPtr& parent, int color, int key, const std::string& label) {
  DPT_CHECK(parent) << label << ": the parent group is null (rank " << g_rank.load() << " is not a member)";
  std::shared_ptr<MpiProcessGroup> mpi_parent = made_by_dist(parent.get());
  DPT_CHECK(mpi_parent) << label << ": " << parent->name()
                        << " is not a group dist made (a wrapper of one cannot be split)";
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(mpi_parent->creation_comm(), color < 0 ? MPI_UNDEFINED : color, key, &comm));
  GroupPtr group = comm == MPI_COMM_NULL ? nullptr : make_group(comm, label);
  mpi_parent->split_nccl(color, key, made_by_dist(group.get()).get());
  return group;
}

// info's local rank and size, host and node, from MPI's nodes (see InitInfo).
void locate_host(InitInfo& info) {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &info.local_rank));
  MPI_CHECK(MPI_Comm_size(node, &info.local_size));
  int lowest = info.local_rank == 0 ? info.rank : 0;  // the host's lowest world rank, on every rank of it
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MAX, node));
  MPI_CHECK(MPI_Comm_free(&node));
  std::vector<int> lowests(static_cast<size_t>(info.world_size));
  MPI_CHECK(MPI_Allgather(&lowest, 1, MPI_INT, lowests.data(), 1, MPI_INT, MPI_COMM_WORLD));
  std::sort(lowests.begin(), lowests.end());
  lowests.erase(std::unique(lowests.begin(), lowests.end()), lowests.end());
  info.node = static_cast<int>(std::lower_bound(lowests.begin(), lowests.end(), lowest) - lowests.begin());
  info.node_count = static_cast<int>(lowests.size());
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  info.host = name;
}

}  // namespace

const InitInfo& init() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.initialized) return s.info;
  DPT_CHECK(!s.finalized)
      << "dist::init() after dist::finalize(): MPI cannot be initialised twice in a process";
  int already = 0, provided = MPI_THREAD_SINGLE;
  MPI_CHECK(MPI_Initialized(&already));
  if (!already) {
    // Open MPI 4.1 runs an in-place MPI_Iallreduce as binomial reduce + broadcast, half the
    // speed of MPI_Allreduce for large buffers; recursive halving reduce-scatter + all-gather
    // (algorithm 3) matches it (tools/bench/bench_allreduce). The user's setting wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
    int rc = MPI_Init_thread(nullptr, nullptr, thread_level_requested(), &provided);
    DPT_CHECK(rc == MPI_SUCCESS) << "MPI_Init_thread failed: " << detail::mpi_error_string(rc);
    s.own_mpi = true;
    // An error inside a nonblocking collective (e.g. MPI_ERR_TRUNCATE when ranks pass
    // different counts) is reported on MPI_COMM_WORLD's handler, whatever the request's
    // communicator: return it, so the collective fails with a dpt::Error naming it instead
    // of Open MPI ending the job with a message that names no collective.
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  } else {
    MPI_CHECK(MPI_Query_thread(&provided));
  }
  DPT_CHECK(provided >= MPI_THREAD_SERIALIZED)
      << "MPI grants " << (provided == MPI_THREAD_SINGLE ? "MPI_THREAD_SINGLE" : "MPI_THREAD_FUNNELED")
      << "; dpt's communication threads need MPI_THREAD_MULTIPLE (or at least MPI_THREAD_SERIALIZED)";
  detail::mpi_serialized = provided < MPI_THREAD_MULTIPLE;

  InitInfo info;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &info.rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &info.world_size));
  locate_host(info);
  g_rank = info.rank;
  install_fatal_handlers(info.rank);
  flight_start(info.rank, info.world_size);

  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  std::vector<int> ranks(info.world_size);
  std::iota(ranks.begin(), ranks.end(), 0);
  s.world = std::make_shared<MpiProcessGroup>(comm, std::move(ranks), "world");
  s.world->make_host_groups(info.node);
  s.groups.push_back(s.world);
  // Registered after state() exists, so it runs before anything constructed earlier is
  // destroyed; groups made later and held in statics are destroyed before it runs. Once:
  // init() gets this far once a process (after finalize() it throws).
  std::atexit(finalize_at_exit);
  s.info = info;
  s.initialized = true;
  return s.info;
}

bool initialized() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.initialized;
}

void finalize() {
  State& s = state();
  std::vector<std::shared_ptr<MpiProcessGroup>> groups;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.initialized) return;
    s.initialized = false;
    s.finalized = true;
    for (auto& weak : s.groups) {
      if (auto group = weak.lock()) groups.push_back(std::move(group));
    }
    s.groups.clear();
    s.world.reset();
  }
  // Newest first: sub-groups before the groups they were made from.
  for (auto it = groups.rbegin(); it != groups.rend(); ++it) (*it)->shutdown();
  groups.clear();
  flight_stop();  // after the shutdowns, whose timeout may still dump
  int finalized = 0;
  MPI_CHECK(MPI_Finalized(&finalized));
  if (s.own_mpi && !finalized) MPI_CHECK(MPI_Finalize());
}

void abort_all(const std::string& message, int code) {
  std::fprintf(stderr, "[rank %d] %s\n", g_rank.load(), message.c_str());
  const std::string flight = flight_dump("fatal: " + message);
  if (!flight.empty()) std::fprintf(stderr, "[rank %d] flight record: %s\n", g_rank.load(), flight.c_str());
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    // mpirun forwards the line above through a pipe, and MPI_Abort's own report through
    // another channel that may overtake it: give the line a head start, so the first thing
    // the user reads is why.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::_Exit(code);
}

namespace {

// A setting of every group: kept in `field` for groups made later, applied to the live ones.
template <class T>
void set_everywhere(const char* what, std::optional<T> State::*field, T value,
                    void (MpiProcessGroup::*apply)(T)) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  DPT_CHECK(s.initialized) << what << " requires dist::init()";
  s.*field = value;
  for (auto& weak : s.groups)
    if (auto group = weak.lock()) (group.get()->*apply)(value);
}

}  // namespace

void set_timeout(double seconds) {
  DPT_CHECK(seconds >= 0 && seconds <= 1e9)
      << "dist::set_timeout: expected seconds in [0, 1e9], got " << seconds;
  const std::chrono::milliseconds timeout(static_cast<int64_t>(seconds * 1000));
  set_everywhere("dist::set_timeout()", &State::timeout, timeout, &MpiProcessGroup::set_timeout);
}

void set_debug_collectives(bool on) {
  set_everywhere("dist::set_debug_collectives()", &State::debug_collectives, on,
                 &MpiProcessGroup::set_debug_collectives);
}

void set_hierarchical(Hierarchical mode) {
  set_everywhere("dist::set_hierarchical()", &State::hierarchical, mode, &MpiProcessGroup::set_hierarchical);
}

const InitInfo& info() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  DPT_CHECK(s.initialized || s.finalized) << "dist::info() requires dist::init()";
  return s.info;
}

std::vector<std::shared_ptr<MpiProcessGroup>> live_mpi_groups() {
  world_checked("dist's groups");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<std::shared_ptr<MpiProcessGroup>> groups;
  for (auto& weak : s.groups)
    if (auto group = weak.lock()) groups.push_back(std::move(group));
  return groups;
}

std::shared_ptr<MpiProcessGroup> made_by_dist(const ProcessGroup* group) {
  if (!group) return nullptr;
  for (auto& live : live_mpi_groups())
    if (live.get() == group) return live;
  return nullptr;
}

GroupPtr world() { return world_checked("dist::world()"); }

CollectiveCounts collective_counts() {
  CollectiveCounts sum;
  for (const auto& group : live_mpi_groups()) sum += group->counts();
  return sum;
}

GroupPtr new_group(const std::vector<int>& ranks) {
  auto world = world_checked("dist::new_group()");
  const std::string label = "new_group(" + ranks_str(ranks) + ")";
  DPT_CHECK(!ranks.empty()) << label << ": a group needs at least one rank";
  for (size_t i = 0; i < ranks.size(); ++i) {
    DPT_CHECK(ranks[i] >= 0 && ranks[i] < world->size())
        << label << ": rank " << ranks[i] << " is outside the world (0.." << world->size() - 1 << ")";
    DPT_CHECK(i == 0 || ranks[i - 1] < ranks[i])
        << label << ": ranks must be strictly increasing (sorted, no repeats)";
  }
  check_same_everywhere(*world, hash_ints(ranks), label);
  const bool member = std::binary_search(ranks.begin(), ranks.end(), world->rank());
  return split_named(world, member ? 0 : -1, world->rank(), "group");
}

GroupPtr split(const GroupPtr& parent, int color, int key) {
  return split_named(parent, color, key, "split(color " + std::to_string(color) + ")");
}

ProcessGroup& require_member(const GroupPtr& group, const std::string& what) {
  DPT_CHECK(group) << "rank " << g_rank.load() << " is not a member of " << what;
  return *group;
}

std::vector<std::string> gather_text(const std::string& text, ProcessGroup& group) {
  if (group.size() == 1) return {text};
  const int n = group.size();
  Tensor lengths = Tensor::empty({n}, DType::i64);
  group
      .all_gather(lengths, Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(text.size())}, {1}))
      ->wait();
  int64_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max(longest, lengths.data<int64_t>()[r]);
  const int64_t words = (longest + 7) / 8;
  Tensor mine = Tensor::zeros({words}, DType::i64);
  std::memcpy(mine.raw_data(), text.data(), text.size());
  Tensor all = Tensor::empty({words * n}, DType::i64);
  group.all_gather(all, mine)->wait();
  std::vector<std::string> out;
  const char* bytes = static_cast<const char*>(all.raw_data());
  for (int r = 0; r < n; ++r) out.emplace_back(bytes + r * words * 8, lengths.data<int64_t>()[r]);
  return out;
}

DeviceMesh::DeviceMesh(std::vector<int> shape, std::vector<std::string> names)
    : shape_(std::move(shape)), names_(std::move(names)) {
  auto world = world_checked("DeviceMesh");
  const std::string label = "DeviceMesh(shape " + ranks_str(shape_) + ")";
  DPT_CHECK(!shape_.empty() && shape_.size() == names_.size())
      << label << ": needs one name per axis, got " << names_.size() << " names";
  int64_t ranks = 1;
  std::set<std::string> seen;
  for (size_t a = 0; a < shape_.size(); ++a) {
    DPT_CHECK(shape_[a] > 0) << label << ": axis '" << names_[a] << "' has size " << shape_[a];
    DPT_CHECK(!names_[a].empty() && seen.insert(names_[a]).second)
        << label << ": axis names must be non-empty and distinct, got '" << names_[a] << "' twice or empty";
    ranks *= shape_[a];
  }
  DPT_CHECK(ranks == world->size()) << label << " holds " << ranks << " ranks but the world has "
                                    << world->size();
  check_same_everywhere(*world, hash_ints(shape_), label);

  coordinates_.resize(shape_.size());
  std::vector<int> strides(shape_.size());
  for (int a = static_cast<int>(shape_.size()) - 1, r = world->rank(), stride = 1; a >= 0; --a) {
    coordinates_[a] = r % shape_[a];
    r /= shape_[a];
    strides[a] = stride;
    stride *= shape_[a];
  }
  // Along axis a: the ranks that differ from this one only in coordinate a. Colour: this
  // rank with coordinate a set to 0, the same for all of them.
  for (size_t a = 0; a < shape_.size(); ++a) {
    int color = world->rank() - coordinates_[a] * strides[a];
    groups_.push_back(split_named(world, color, coordinates_[a], "mesh." + names_[a]));
  }
}

GroupPtr DeviceMesh::group(const std::string& axis) const {
  std::string axes;
  for (size_t a = 0; a < names_.size(); ++a) {
    if (names_[a] == axis) return groups_[a];
    axes += (a ? ", " : "") + names_[a];
  }
  DPT_FAIL() << "DeviceMesh has no axis '" << axis << "' (axes: " << axes << ")";
}

}  // namespace dpt::dist
