// The hierarchical all-reduce (comm/hierarchical.h) across hosts: under
// tools/cluster.sh (2 hosts x 2 and 2 x 1 processes) the real ones; under a plain mpirun
// -np 2/3/4 hosts simulated by the node each rank passes to make_host_groups (2 x 1, 3 x 1,
// 2 x 2 with a host's ranks interleaved). For every op and dtype, on the world (or its
// simulated twin) and on a group whose ranks run in reverse order across the hosts, every rank
// ends with the same bits, those of a plain loop that adds in the algorithm's order, and within
// f32 rounding of the flat all-reduce; the host and across sub-groups carry it; bf16
// compression against a plain loop that rounds to bf16 by another method, ties included.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/dist.h"
#include "comm/hierarchical.h"
#include "comm/mpi_process_group.h"

using namespace dpt;
using namespace dpt::dist;

namespace {

constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max};
// Sizes with empty shares (1 element, 3 ranks' worth), uneven chunks, and several buckets' worth.
constexpr int64_t kSizes[] = {1, 3, 1001, 100003};

MpiProcessGroup& mpi(const GroupPtr& group) { return dynamic_cast<MpiProcessGroup&>(*group); }

// The hosts the tests run across: the real ones when the world spans several; else, on one
// machine, 2 simulated hosts (3 for an odd world), world rank r on host r % hosts.
bool hosts_are_real() { return mpi(world()).host_groups().across != nullptr; }

int node_of(int world_rank) {
  if (hosts_are_real()) {
    static const std::vector<int> nodes = [] {
      std::vector<int> all(static_cast<size_t>(info().world_size));
      int mine = info().node;
      MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
      return all;
    }();
    return nodes[static_cast<size_t>(world_rank)];
  }
  const int size = info().world_size;
  return world_rank % (size % 2 == 0 ? 2 : size);
}

// The groups under test: the world, and the world in reverse order (its group rank 0 on the
// last host); on one machine, copies of them with simulated host groups.
const std::vector<GroupPtr>& groups_to_test() {
  static const std::vector<GroupPtr> groups = [] {
    if (hosts_are_real()) return std::vector<GroupPtr>{world(), split(world(), 0, -world()->rank())};
    std::vector<GroupPtr> twins = {split(world(), 0, world()->rank()), split(world(), 0, -world()->rank())};
    for (const GroupPtr& g : twins) mpi(g).make_host_groups(node_of(world()->rank()));
    return twins;
  }();
  return groups;
}

// Element i of world rank r: values of many magnitudes and signs, so the order of additions
// shows in the low bits; i64: integers of both signs.
double input(int world_rank, int64_t i) {
  const uint64_t h =
      (static_cast<uint64_t>(world_rank) * 1000003u + static_cast<uint64_t>(i)) * 0x9e3779b97f4a7c15u;
  const double unit = static_cast<double>(h >> 11) / 9007199254740992.0 - 0.5;  // [-0.5, 0.5)
  return std::ldexp(unit, static_cast<int>(i % 13) - 4);
}

Tensor input_tensor(int world_rank, int64_t n, DType dtype) {
  Tensor t = Tensor::empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::f32)
      t.data<float>()[i] = static_cast<float>(input(world_rank, i));
    else
      t.data<int64_t>()[i] = static_cast<int64_t>(std::llround(input(world_rank, i) * 1e6));
  }
  return t;
}

// Rounds to bf16 (8 significant bits), to nearest, ties to even: frexp and nearbyint rather
// than core/dtype.h's bit arithmetic. For normal, finite values.
float bf16_reference(float x) {
  if (x == 0) return x;
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e);  // x = m * 2^e, 0.5 <= |m| < 1
  return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8));
}

// Where the group's ranks run: each member's host, its local index, and the hosts in the
// order of each local index's across group (by the group rank of that index's member).
struct Layout {
  int per_host = 0;
  std::vector<std::vector<int>> members_of_host;  // host (node) -> group ranks, in group-rank order
  std::vector<std::vector<int>> hosts_of_index;   // local index -> hosts in across-group order
};

Layout layout_of(const ProcessGroup& group) {
  std::map<int, std::vector<int>> by_node;
  for (int g = 0; g < group.size(); ++g) by_node[node_of(group.world_ranks()[g])].push_back(g);
  Layout layout;
  for (auto& [node, members] : by_node) layout.members_of_host.push_back(members);
  layout.per_host = static_cast<int>(layout.members_of_host.front().size());
  for (int l = 0; l < layout.per_host; ++l) {
    std::vector<int> hosts(layout.members_of_host.size());
    for (size_t h = 0; h < hosts.size(); ++h) hosts[h] = static_cast<int>(h);
    std::sort(hosts.begin(), hosts.end(),
              [&](int a, int b) { return layout.members_of_host[a][l] < layout.members_of_host[b][l]; });
    layout.hosts_of_index.push_back(hosts);
  }
  return layout;
}

template <class T>
T apply(ReduceOp op, T a, T b) {
  if (op == ReduceOp::min) return std::min(a, b);
  if (op == ReduceOp::max) return std::max(a, b);
  return a + b;
}

// The hierarchical all-reduce as a plain loop: each host's ranks combined in group-rank order
// (with at most 2 a host, the order MPI's reduce-scatter uses), then the hosts in the order of
// the across group that owns the element, in the element's dtype (f32 for bf16 wires); avg
// divides at the end; bf16 rounds each host's value and the result.
template <class T>
std::vector<T> reference(const ProcessGroup& group, const Layout& layout, int64_t n, ReduceOp op, bool bf16) {
  std::vector<std::vector<T>> x;
  for (int g = 0; g < group.size(); ++g) {
    Tensor t = input_tensor(group.world_ranks()[g], n, dtype_of<T>());
    x.emplace_back(t.data<T>(), t.data<T>() + n);
  }
  auto round = [&](T v) { return bf16 ? static_cast<T>(bf16_reference(static_cast<float>(v))) : v; };
  std::vector<T> out(n);
  for (int64_t i = 0; i < n; ++i) {
    int l = 0;
    while (chunk_of(n, layout.per_host, l).end <= i) ++l;
    bool first = true;
    T acc{};
    for (int h : layout.hosts_of_index[l]) {
      const std::vector<int>& members = layout.members_of_host[h];
      T partial = x[members[0]][i];
      for (size_t k = 1; k < members.size(); ++k) partial = apply(op, partial, x[members[k]][i]);
      acc = first ? round(partial) : apply(op, acc, round(partial));
      first = false;
    }
    if (op == ReduceOp::avg) acc /= static_cast<T>(group.size());
    out[i] = round(acc);
  }
  return out;
}

// The number of collectives `group` has made (its next one's number - 1).
int64_t collectives_made(const GroupPtr& group) {
  WorkPtr work = group->barrier();
  work->wait();
  const std::string text = dynamic_cast<CommTask&>(*work).describe();
  return std::stoll(text.substr(text.rfind('#') + 1)) - 1;
}

// Every rank of the world has the same bytes in t (group: the world or a reordering of it).
void expect_same_bits_everywhere(const Tensor& t, const std::string& what) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
  for (size_t k = 0; k < static_cast<size_t>(t.numel()) * dtype_size(t.dtype()); ++k)
    h = (h ^ bytes[k]) * 1099511628211ull;
  std::vector<uint64_t> all(static_cast<size_t>(info().world_size));
  MPI_Allgather(&h, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (size_t r = 1; r < all.size(); ++r)
    EXPECT_EQ(all[r], all[0]) << what << ": rank " << r << "'s bits differ from rank 0's";
}

template <class T>
void expect_equal(const Tensor& t, const std::vector<T>& want, const std::string& what) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::memcmp(&t.data<T>()[i], &want[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " is " << t.data<T>()[i] << ", the plain loop gives "
                    << want[i];
      return;
    }
}

class AcrossHosts : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const GroupPtr& g : groups_to_test()) mpi(g).set_hierarchical(Hierarchical::automatic);
  }
};

void check_all_reduce(const GroupPtr& group, DType dtype, ReduceOp op, int64_t n) {
  const std::string what =
      group->name() + " " + reduce_op_name(op) + " of " + std::to_string(n) + " " + dtype_name(dtype);
  const Layout layout = layout_of(*group);
  MpiProcessGroup& g = mpi(group);
  g.set_hierarchical(Hierarchical::off);
  Tensor flat = input_tensor(world()->rank(), n, dtype);
  group->all_reduce(flat, op)->wait();

  g.set_hierarchical(Hierarchical::on);
  const HostGroups& sub = g.host_groups();
  const int64_t host_before = sub.host ? collectives_made(sub.host) : 0,
                across_before = collectives_made(sub.across);
  Tensor hier = input_tensor(world()->rank(), n, dtype);
  group->all_reduce(hier, op)->wait();
  // Two collectives in each sub-group (reduce-scatter and all-gather; all_to_all and
  // all-gather), plus the barrier that counts them.
  if (sub.host) {
    EXPECT_EQ(collectives_made(sub.host), host_before + 3) << what;
  }
  EXPECT_EQ(collectives_made(sub.across), across_before + 3) << what;

  expect_same_bits_everywhere(hier, what);
  if (dtype == DType::i64) {
    expect_equal(hier, reference<int64_t>(*group, layout, n, op, false), what);
    expect_equal(hier, std::vector<int64_t>(flat.data<int64_t>(), flat.data<int64_t>() + n),
                 what + " vs flat");
    return;
  }
  if (layout.per_host <= 2) expect_equal(hier, reference<float>(*group, layout, n, op, false), what);
  // Against the flat one: each is within (size - 1) roundings of the exact sum.
  const double scale = op == ReduceOp::avg ? 1.0 / group->size() : 1.0;
  for (int64_t i = 0; i < n; ++i) {
    double magnitude = 0;
    for (int r : group->world_ranks()) magnitude += std::abs(input(r, i));
    const double bound = op == ReduceOp::min || op == ReduceOp::max
                             ? 0.0
                             : 2.0 * (group->size() - 1) * std::ldexp(1.0, -24) * magnitude * scale * 1.01;
    const double diff = std::abs(static_cast<double>(hier.data<float>()[i]) - flat.data<float>()[i]);
    if (diff > bound) {
      ADD_FAILURE() << what << ": element " << i << " hierarchical " << hier.data<float>()[i] << ", flat "
                    << flat.data<float>()[i] << ": differ by " << diff << " > " << bound;
      return;
    }
  }
}

}  // namespace

TEST_F(AcrossHosts, EveryOpAndDtypeIsBitIdenticalAndMatchesFlat) {
  for (const GroupPtr& group : groups_to_test())
    for (DType dtype : {DType::f32, DType::i64})
      for (ReduceOp op : kOps)
        for (int64_t n : kSizes) check_all_reduce(group, dtype, op, n);
}

TEST_F(AcrossHosts, AutomaticNeedsMoreThanOneRankOnAHost) {
  const GroupPtr& group = groups_to_test().front();
  MpiProcessGroup& g = mpi(group);
  const Layout layout = layout_of(*group);
  const int hosts = static_cast<int>(layout.members_of_host.size());
  const HostGroups& sub = g.host_groups();
  const std::string text = g.all_reduce_text();
  EXPECT_EQ(text, std::string(layout.per_host > 1 ? "hierarchical" : "flat") +
                      " all-reduce: " + std::to_string(hosts) + " hosts x " +
                      std::to_string(layout.per_host) + " rank" + (layout.per_host > 1 ? "s" : ""));
  EXPECT_EQ(sub.host ? sub.host->size() : 1, layout.per_host);
  ASSERT_EQ(sub.host != nullptr, layout.per_host > 1);
  // The host group holds this host's ranks in group-rank order; the across group one rank a
  // host, those of this rank's local index, in the order of their group ranks.
  const int node = node_of(world()->rank());
  const std::vector<int>& mates = layout.members_of_host[static_cast<size_t>(node)];
  const int local = static_cast<int>(std::find(mates.begin(), mates.end(), group->rank()) - mates.begin());
  if (sub.host) {
    EXPECT_EQ(sub.host->rank(), local);
    EXPECT_EQ(sub.host->size(), layout.per_host);
  }
  const std::vector<int>& order = layout.hosts_of_index[static_cast<size_t>(local)];
  EXPECT_EQ(sub.across->size(), hosts);
  EXPECT_EQ(sub.across->rank(), std::find(order.begin(), order.end(), node) - order.begin());
}

// Hosts that hold different numbers of the group's ranks: no host groups, the reason in the
// world table's text, and the all_reduce flat (and right) whatever the mode.
TEST(UnevenHosts, StayFlat) {
  const int size = world()->size(), rank = world()->rank();
  if (hosts_are_real() || size < 3)
    GTEST_SKIP() << "simulates hosts of 1 and size - 1 ranks on one machine: np >= 3";
  GroupPtr group = split(world(), 0, rank);
  mpi(group).make_host_groups(rank == 0 ? 0 : 1);
  EXPECT_EQ(mpi(group).host_groups().across, nullptr);
  EXPECT_EQ(mpi(group).all_reduce_text(), "flat all-reduce: its hosts hold between 1 and " +
                                              std::to_string(size - 1) +
                                              " of its ranks (the hierarchical all-reduce needs the same "
                                              "number on every host)");
  mpi(group).set_hierarchical(Hierarchical::on);
  Tensor t = Tensor::full({5}, static_cast<float>(rank + 1));
  all_reduce_bf16_across_hosts(*group, t, ReduceOp::sum)->wait();
  for (float v : t.to_vector()) EXPECT_EQ(v, size * (size + 1) / 2);
}

TEST_F(AcrossHosts, Bf16CompressionMatchesPlainLoopRounding) {
  for (const GroupPtr& group : groups_to_test()) {
    const Layout layout = layout_of(*group);
    if (layout.per_host > 2) GTEST_SKIP() << "the plain loop's order holds for at most 2 ranks a host";
    auto compressed_all_reduce = [&](const Tensor& t, ReduceOp op) {
      return all_reduce_bf16_across_hosts(*group, t, op);
    };
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg})
      for (int64_t n : kSizes) {
        const std::string what = group->name() + " bf16 " + reduce_op_name(op) + " of " + std::to_string(n);
        Tensor t = input_tensor(world()->rank(), n, DType::f32);
        compressed_all_reduce(t, op)->wait();
        expect_same_bits_everywhere(t, what);
        expect_equal(t, reference<float>(*group, layout, n, op, true), what);
      }
    // min, max and i64 are not compressed: the same bits as without compression.
    for (ReduceOp op : {ReduceOp::min, ReduceOp::max}) {
      mpi(group).set_hierarchical(Hierarchical::on);
      Tensor plain = input_tensor(world()->rank(), 1001, DType::f32), squeezed = plain.clone();
      group->all_reduce(plain, op)->wait();
      compressed_all_reduce(squeezed, op)->wait();
      expect_equal(squeezed, plain.to_vector(), group->name() + " compressed " + reduce_op_name(op));
    }
  }
}

// Ties at both roundings, 2 hosts x 2 ranks. Element pairs at scales 2^-8 .. 2^7: (a) host 0's
// ranks add to 257 (half way between bf16's 256 and 258: to 256, the even one), host 1's to 1;
// 256 + 1 = 257 rounds to 256 again (unrounded: 258). (b) host 0's add to 259 (to 260, even),
// host 1's to 2: 262 (unrounded: 261, a tie, 260; truncated: 258 + 2 = 260).
TEST_F(AcrossHosts, Bf16RoundsTiesToEven) {
  const GroupPtr& group = groups_to_test().front();
  const Layout layout = layout_of(*group);
  if (layout.per_host != 2 || layout.members_of_host.size() != 2) GTEST_SKIP() << "needs 2 hosts x 2 ranks";
  const int node = node_of(world()->rank());
  const int local = group->rank() == layout.members_of_host[static_cast<size_t>(node)][0] ? 0 : 1;
  // parts[case][node][local rank]
  const float parts[2][2][2] = {{{256, 1}, {1, 0}}, {{256, 3}, {2, 0}}};
  const float want[2] = {256, 262};
  Tensor t = Tensor::empty({32});
  auto scale = [](int64_t i) { return std::ldexp(1.0f, static_cast<int>(i / 2) - 8); };
  for (int64_t i = 0; i < 32; ++i) t.data<float>()[i] = parts[i % 2][node][local] * scale(i);
  all_reduce_bf16_across_hosts(*group, t, ReduceOp::sum)->wait();
  for (int64_t i = 0; i < 32; ++i) EXPECT_EQ(t.data<float>()[i], want[i % 2] * scale(i)) << "element " << i;
}
