// Sub-groups under mpirun (np 2-4): new_group, split by colour, DeviceMesh axes; their
// names, group-relative ranks and world ranks, collectives on them checked against closed
// forms (every collective, on a proper sub-group, and its timeout), nullptr for
// non-members, and the errors for bad arguments. Groups are made in the
// same order on every rank, and every rank runs every test.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>

#include "closed_form.h"
#include "comm/dist.h"
#include "comm/mpi_process_group.h"

using namespace dpt;
using namespace dpt::dist;
using dpt::testing::expect_values;
using dpt::testing::make;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& message, const std::string& part) {
  return message.find(part) != std::string::npos;
}

// Checks `g` holds exactly `members` (world ranks, in group-rank order) as seen from this
// rank, then all-reduces (world rank + 1) over it and broadcasts from its last rank.
void expect_group(const GroupPtr& g, const std::vector<int>& members, const std::string& name) {
  const int me = info().rank;
  auto at = std::find(members.begin(), members.end(), me);
  if (at == members.end()) {
    EXPECT_EQ(g, nullptr) << "rank " << me << " is not in " << name << " but got a group";
    return;
  }
  ASSERT_NE(g, nullptr) << "rank " << me << " is in " << name << " but got nullptr";
  EXPECT_EQ(g->name(), name);
  EXPECT_EQ(g->world_ranks(), members);
  EXPECT_EQ(g->size(), static_cast<int>(members.size()));
  EXPECT_EQ(g->rank(), at - members.begin());
  Tensor sum = Tensor::full({3}, static_cast<float>(me + 1));
  Tensor from_last = Tensor::full({2}, static_cast<float>(me));
  WorkPtr a = g->all_reduce(sum), b = g->broadcast(from_last, g->size() - 1);
  b->wait();
  a->wait();
  const float expected = std::accumulate(members.begin(), members.end(), 0.0f) + members.size();
  EXPECT_EQ(sum.to_vector(), std::vector<float>(3, expected)) << name;
  EXPECT_EQ(from_last.to_vector(), std::vector<float>(2, static_cast<float>(members.back()))) << name;
}

std::vector<int> ranks_where(const std::function<bool(int)>& keep) {
  std::vector<int> ranks;
  for (int r = 0; r < info().world_size; ++r) {
    if (keep(r)) ranks.push_back(r);
  }
  return ranks;
}

}  // namespace

TEST(MpiGroups, NewGroupEvensAndOdds) {
  // np 4: {0,2} and {1,3}; np 3: {0,2} and {1}; np 2: {0} and {1}.
  std::vector<int> evens = ranks_where([](int r) { return r % 2 == 0; });
  std::vector<int> odds = ranks_where([](int r) { return r % 2 == 1; });
  GroupPtr ge = new_group(evens);
  GroupPtr go = odds.empty() ? nullptr : new_group(odds);
  expect_group(ge, evens, "group" + ranks_str(evens));
  if (!odds.empty()) expect_group(go, odds, "group" + ranks_str(odds));
}

TEST(MpiGroups, CollectivesOnTwoGroupsAndTheWorldAtOnce) {
  // Each group has its own queue: work on all three overlaps.
  const int me = info().rank, n = info().world_size;
  GroupPtr evens = new_group(ranks_where([](int r) { return r % 2 == 0; }));
  GroupPtr odds = n > 1 ? new_group(ranks_where([](int r) { return r % 2 == 1; })) : nullptr;
  GroupPtr own = me % 2 == 0 ? evens : odds;
  Tensor in_world = Tensor::full({1000}, 1.0f), in_group = Tensor::full({1000}, 2.0f);
  WorkPtr a = world()->all_reduce(in_world);
  WorkPtr b = own->all_reduce(in_group);
  b->wait();
  a->wait();
  EXPECT_EQ(in_world.to_vector(), std::vector<float>(1000, static_cast<float>(n)));
  EXPECT_EQ(in_group.to_vector(), std::vector<float>(1000, 2.0f * own->size()));
}

TEST(MpiGroups, OneGroupProgressesWhileTheCallerPollsAnother) {
  // Rank 0 waits on (polls) a world all_reduce that rank 1 joins only once their pair's
  // all_reduce is complete; that needs rank 0's pair collective to progress meanwhile, on
  // the process's communication thread. Also (CTest) under SERIALIZED.
  const int me = info().rank, n = info().world_size;
  GroupPtr pair = split(world(), me < 2 ? 0 : -1, me);
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  for (int round = 0; round < 3; ++round) {
    Tensor big = Tensor::full({1 << 20}, static_cast<float>(me + 1));
    Tensor small = Tensor::full({100}, 1.0f);
    if (me == 0) {
      WorkPtr p = pair->all_reduce(big);
      WorkPtr w = world()->all_reduce(small);
      w->wait();
      p->wait();
    } else if (me == 1) {
      pair->all_reduce(big)->wait();
      world()->all_reduce(small)->wait();
    } else {
      world()->all_reduce(small)->wait();
    }
    EXPECT_EQ(small.to_vector()[99], static_cast<float>(n));
    if (me < 2) {
      EXPECT_EQ(big.to_vector()[12345], 3.0f);
    }
  }
}

// Threads of this process named `name` (/proc/self/task/*/comm).
int threads_named(const std::string& name) {
  int count = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ++count;
  }
  return count;
}

TEST(MpiGroups, OneCommunicationThreadServesEveryGroup) {
  // World, evens/odds and a split pair, each with big all-reduces left in flight for the
  // thread to progress while the caller does not wait: one "dpt-comm" thread in all.
  const int me = info().rank;
  GroupPtr evens = new_group(ranks_where([](int r) { return r % 2 == 0; }));
  GroupPtr odds = world()->size() > 1 ? new_group(ranks_where([](int r) { return r % 2 == 1; })) : nullptr;
  GroupPtr parity = me % 2 == 0 ? evens : odds;
  GroupPtr pair = split(world(), me / 2, me);
  std::vector<Tensor> tensors;
  std::vector<WorkPtr> works;
  for (const GroupPtr& g : {world(), parity, pair}) {
    tensors.push_back(Tensor::full({1 << 18}, 1.0f));
    works.push_back(g->all_reduce(tensors.back()));
  }
  EXPECT_EQ(threads_named("dpt-comm"), 1);
  for (const WorkPtr& w : works) w->wait();
  EXPECT_EQ(tensors[0].to_vector()[7], static_cast<float>(world()->size()));
  EXPECT_EQ(tensors[1].to_vector()[7], static_cast<float>(parity->size()));
  EXPECT_EQ(tensors[2].to_vector()[7], static_cast<float>(pair->size()));
}

TEST(MpiGroups, NewGroupWhileTheWorldHasWorkInFlight) {
  // Groups are made from a second communicator, so creation need not wait for this.
  Tensor t = Tensor::full({1 << 16}, 1.0f);
  WorkPtr w = world()->all_reduce(t);
  GroupPtr first = new_group({0});
  w->wait();
  expect_group(first, {0}, "group[0]");
  EXPECT_EQ(t.to_vector()[123], static_cast<float>(info().world_size));
}

TEST(MpiGroups, SplitByParityWithReversedKeys) {
  const int me = info().rank;
  GroupPtr g = split(world(), me % 2, -me);  // key -rank: group rank order is reversed
  std::vector<int> members = ranks_where([&](int r) { return r % 2 == me % 2; });
  std::reverse(members.begin(), members.end());
  expect_group(g, members, "split(color " + std::to_string(me % 2) + ")" + ranks_str(members));
}

TEST(MpiGroups, SplitWithNegativeColourGivesNull) {
  const int me = info().rank;
  GroupPtr g = split(world(), me == 0 ? -1 : 5, 0);
  std::vector<int> members = ranks_where([](int r) { return r != 0; });
  if (me == 0) {
    EXPECT_EQ(g, nullptr);
  } else {
    expect_group(g, members, "split(color 5)" + ranks_str(members));
  }
}

TEST(MpiGroups, SplitOfASubGroup) {
  const int me = info().rank, n = info().world_size;
  GroupPtr all_but_last = new_group(ranks_where([&](int r) { return r < n - 1 || n == 1; }));
  GroupPtr halves = all_but_last ? split(all_but_last, all_but_last->rank() % 2, 0) : nullptr;
  if (!all_but_last) {
    std::string m = error_of([&] { split(all_but_last, 0, 0); });
    EXPECT_TRUE(has(m, "split(color 0): the parent group is null (rank " + std::to_string(me))) << m;
    EXPECT_EQ(halves, nullptr);
    return;
  }
  std::vector<int> members = ranks_where([&](int r) { return (r < n - 1 || n == 1) && r % 2 == me % 2; });
  expect_group(halves, members, "split(color " + std::to_string(me % 2) + ")" + ranks_str(members));
}

TEST(MpiGroups, GroupRelativeRanksInPointToPoint) {
  // In the odd ranks' group (np >= 4: world ranks 1 and 3), group rank 0 sends to group rank 1.
  const int n = info().world_size;
  if (n < 4) GTEST_SKIP() << "needs four ranks";
  GroupPtr odds = new_group(ranks_where([](int r) { return r % 2 == 1; }));
  if (!odds) return;
  Tensor t = Tensor::full({5}, static_cast<float>(info().rank));
  if (odds->rank() == 0) odds->send(t, 1, 4)->wait();
  if (odds->rank() == 1) {
    odds->recv(t, 0, 4)->wait();
    EXPECT_EQ(t.to_vector(), std::vector<float>(5, static_cast<float>(odds->world_ranks()[0])));
  }
  std::string m = error_of([&] { odds->send(t, odds->size(), 0); });
  EXPECT_TRUE(has(m, "send on group[1,3]: dst 2 is not a rank of this group of 2 (0..1)")) << m;
}

TEST(MpiGroups, MeshRowsAndColumns) {
  const int me = info().rank, n = info().world_size;
  std::vector<std::vector<int>> shapes = {{1, n}, {n, 1}};
  if (n % 2 == 0 && n >= 4) shapes.push_back({2, n / 2});
  for (const auto& shape : shapes) {
    DeviceMesh mesh(shape, {"dp", "tp"});
    const int cols = shape[1];
    EXPECT_EQ(mesh.coordinates(), (std::vector<int>{me / cols, me % cols}));
    // "tp": my row (same dp coordinate); "dp": my column (same tp coordinate).
    std::vector<int> row = ranks_where([&](int r) { return r / cols == me / cols; });
    std::vector<int> column = ranks_where([&](int r) { return r % cols == me % cols; });
    expect_group(mesh.group("tp"), row, "mesh.tp" + ranks_str(row));
    expect_group(mesh.group("dp"), column, "mesh.dp" + ranks_str(column));
    std::string m = error_of([&] { mesh.group("pp"); });
    EXPECT_TRUE(has(m, "DeviceMesh has no axis 'pp' (axes: dp, tp)")) << m;
  }
}

TEST(MpiGroups, MeshErrors) {
  const int n = info().world_size;
  std::string m = error_of([&] { DeviceMesh({2, n}, {"dp", "tp"}); });
  EXPECT_TRUE(has(m, "DeviceMesh(shape [2," + std::to_string(n) + "]) holds " + std::to_string(2 * n) +
                         " ranks but the world has " + std::to_string(n)))
      << m;
  m = error_of([&] { DeviceMesh({n}, {"dp", "tp"}); });
  EXPECT_TRUE(has(m, "needs one name per axis, got 2 names")) << m;
  m = error_of([&] { DeviceMesh({n, 1}, {"dp", "dp"}); });
  EXPECT_TRUE(has(m, "axis names must be non-empty and distinct")) << m;
}

TEST(MpiGroups, NewGroupErrorsOnEveryRank) {
  const int n = info().world_size;
  std::string m = error_of([&] { new_group({}); });
  EXPECT_TRUE(has(m, "new_group([]): a group needs at least one rank")) << m;
  m = error_of([&] { new_group({0, n}); });
  EXPECT_TRUE(has(m, "new_group([0," + std::to_string(n) + "]): rank " + std::to_string(n) +
                         " is outside the world (0.." + std::to_string(n - 1) + ")"))
      << m;
  m = error_of([&] { new_group({0, 0}); });
  EXPECT_TRUE(has(m, "new_group([0,0]): ranks must be strictly increasing (sorted, no repeats)")) << m;
  if (n > 1) {
    m = error_of([&] { new_group({1, 0}); });
    EXPECT_TRUE(has(m, "new_group([1,0]): ranks must be strictly increasing")) << m;
    // Different lists on different ranks: found by one small all-reduce, the same on all.
    m = error_of([&] { new_group({info().rank}); });
    EXPECT_TRUE(has(m, "the ranks passed different arguments; every rank of world must pass the same ones"))
        << m;
  }
  world()->barrier()->wait();  // and the world is still usable
}

TEST(MpiGroups, RequireMember) {
  GroupPtr first = new_group({0});
  const int me = info().rank;
  if (me == 0) {
    EXPECT_EQ(&require_member(first, "group[0]"), first.get());
  } else {
    std::string m = error_of([&] { require_member(first, "group[0]"); });
    EXPECT_EQ(m, "rank " + std::to_string(me) + " is not a member of group[0]");
  }
}

TEST(MpiGroups, ShutDownGroupThrowsOnUse) {
  GroupPtr g = split(world(), 0, 0);
  auto* mpi = dynamic_cast<MpiProcessGroup*>(g.get());
  ASSERT_NE(mpi, nullptr);
  Tensor t = Tensor::full({4}, 1.0f);
  g->all_reduce(t);  // not waited for: shutdown() lets it complete
  mpi->shutdown();
  mpi->shutdown();  // idempotent
  EXPECT_EQ(t.to_vector(), std::vector<float>(4, static_cast<float>(info().world_size)));
  std::string m = error_of([&] { g->all_reduce(t); });
  EXPECT_TRUE(has(m, "all_reduce(sum) of 4 f32 on split(color 0)")) << m;
  EXPECT_TRUE(has(m, "used after")) << m;
}

// Every collective on a proper sub-group, against closed forms of inputs that depend on
// the members' world ranks: one that ran over the wrong ranks, or took world ranks for
// group ranks, gives other values.
namespace {

// np 4: {1} and {0,2,3}; np 3: {1} and {0,2}; np 2: {1} and {0}. Every rank is in one,
// and in the larger one group ranks and world ranks differ.
GroupPtr all_but_rank_one() {
  const int me = info().rank;
  return split(world(), me == 1 ? 1 : 0, me);
}

// The group rank whose chunk_of(n, size, .) holds element i.
int owner_of(int64_t i, int64_t n, int size) {
  for (int q = 0; q < size; ++q) {
    Chunk c = chunk_of(n, size, q);
    if (i >= c.begin && i < c.end) return q;
  }
  return -1;
}

constexpr int64_t kBeyond32Bits = int64_t(1) << 33;

}  // namespace

TEST(MpiSubGroup, AllReduceWithEveryOp) {
  GroupPtr g = all_but_rank_one();
  const std::vector<int>& members = g->world_ranks();
  const int me = info().rank, n = g->size();
  // Rank with world rank w holds (w + 1) * 4 + i % 5.
  double s = 0, lo = 1e9, hi = -1e9;
  for (int w : members) {
    s += w + 1;
    lo = std::min<double>(lo, w + 1);
    hi = std::max<double>(hi, w + 1);
  }
  for (int64_t size : {1, 7, 1000}) {
    std::vector<Tensor> t;
    std::vector<WorkPtr> works;
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max}) {
      t.push_back(make<float>(size, [&](int64_t i) { return (me + 1) * 4 + i % 5; }));
      works.push_back(g->all_reduce(t.back(), op));
    }
    Tensor big = make<int64_t>(size, [&](int64_t i) { return (me + 1) * kBeyond32Bits + i; });
    works.push_back(g->all_reduce(big));
    for (const WorkPtr& w : works) w->wait();
    const std::string at = " on " + g->name() + " at n " + std::to_string(size);
    expect_values<float>(
        t[0], [&](int64_t i) { return 4 * s + n * (i % 5); }, "sum" + at);
    expect_values<float>(
        t[1], [&](int64_t i) { return static_cast<float>(4 * s + n * (i % 5)) / n; }, "avg" + at);
    expect_values<float>(
        t[2], [&](int64_t i) { return 4 * lo + i % 5; }, "min" + at);
    expect_values<float>(
        t[3], [&](int64_t i) { return 4 * hi + i % 5; }, "max" + at);
    expect_values<int64_t>(
        big, [&](int64_t i) { return static_cast<int64_t>(s) * kBeyond32Bits + n * i; }, "i64 sum" + at);
  }
}

TEST(MpiSubGroup, AllGatherAndReduceScatterUneven) {
  GroupPtr g = all_but_rank_one();
  const std::vector<int>& members = g->world_ranks();
  const int me = info().rank, n = g->size(), r = g->rank();
  double s = 0, lo = 1e9, hi = -1e9;
  for (int w : members) {
    s += w + 1;
    lo = std::min<double>(lo, w + 1);
    hi = std::max<double>(hi, w + 1);
  }
  for (int64_t size : {0, 1, 2, 5, 7, 1001}) {  // most do not divide by 2 or 3
    Chunk c = chunk_of(size, n, r);
    // all_gather: this rank's chunk holds (w + 1) * 10000 + i at element i of the whole.
    Tensor gathered = make<float>(size, [](int64_t) { return -1; });
    Tensor chunk = make<float>(c.end - c.begin, [&](int64_t j) { return (me + 1) * 10000 + c.begin + j; });
    // reduce_scatter: rank w's input is (w + 1) + i % 7.
    Tensor in = make<float>(size, [&](int64_t i) { return (me + 1) + i % 7; });
    std::vector<Tensor> outs;
    std::vector<WorkPtr> works{g->all_gather(gathered, chunk)};
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max}) {
      outs.push_back(make<float>(c.end - c.begin, [](int64_t) { return -1; }));
      works.push_back(g->reduce_scatter(outs.back(), in, op));
    }
    for (const WorkPtr& w : works) w->wait();
    const std::string at =
        " on " + g->name() + " at n " + std::to_string(size) + ", group rank " + std::to_string(r);
    expect_values<float>(
        gathered, [&](int64_t i) { return (members[owner_of(i, size, n)] + 1) * 10000 + i; },
        "all_gather" + at);
    auto whole = [&](int64_t j) { return c.begin + j; };  // element j of the chunk in the whole
    expect_values<float>(
        outs[0], [&](int64_t j) { return s + n * (whole(j) % 7); }, "reduce_scatter sum" + at);
    expect_values<float>(
        outs[1], [&](int64_t j) { return static_cast<float>(s + n * (whole(j) % 7)) / n; },
        "reduce_scatter avg" + at);
    expect_values<float>(
        outs[2], [&](int64_t j) { return lo + whole(j) % 7; }, "reduce_scatter min" + at);
    expect_values<float>(
        outs[3], [&](int64_t j) { return hi + whole(j) % 7; }, "reduce_scatter max" + at);
  }
}

TEST(MpiSubGroup, BroadcastFromEveryGroupRankAndSendRecvRing) {
  GroupPtr g = all_but_rank_one();
  const std::vector<int>& members = g->world_ranks();
  const int me = info().rank, n = g->size(), r = g->rank();
  for (int root = 0; root < n; ++root) {
    Tensor t = make<float>(9, [&](int64_t i) { return me * 100 + i; });
    g->broadcast(t, root)->wait();
    expect_values<float>(
        t, [&](int64_t i) { return members[root] * 100 + i; },
        "broadcast from group rank " + std::to_string(root) + " on " + g->name());
  }
  if (n < 2) return;  // a group of one has no one to send to
  // Group rank r sends to r + 1 and receives from r - 1 (around the ring); large messages
  // need the receive posted while the send is in flight.
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int64_t size : {1, 7, (1 << 18) + 3}) {
    Tensor mine = make<float>(size, [&](int64_t i) { return me * 10 + i % 10; });
    Tensor got = make<float>(size, [](int64_t) { return -1; });
    WorkPtr sent = g->send(mine, next, 5), received = g->recv(got, prev, 5);
    received->wait();
    sent->wait();
    expect_values<float>(
        got, [&](int64_t i) { return members[prev] * 10 + i % 10; },
        "ring on " + g->name() + " at n " + std::to_string(size));
  }
}

TEST(MpiSubGroup, TimeoutNamesTheGroupAndItsLateRanks) {
  // Group rank 0 (world rank 0) waits on a barrier of {0,2} (np 3) or {0,2,3} (np 4) with
  // a 0.2 s timeout. The others join only once it has timed out: it tells them by a world
  // message, so the order does not depend on how busy the machine is. The barrier then
  // completes, and the group goes on.
  if (info().world_size < 3) GTEST_SKIP() << "needs 3 ranks for a proper sub-group of 2 or more";
  GroupPtr g = all_but_rank_one();
  if (g->size() < 2) return;  // world rank 1, in a group of its own
  auto* mpi = dynamic_cast<MpiProcessGroup*>(g.get());
  ASSERT_NE(mpi, nullptr);
  const std::vector<int>& members = g->world_ranks();
  const int me = info().rank, n = g->size();
  Tensor go = Tensor::zeros({1});
  if (g->rank() == 0) {
    const std::chrono::milliseconds before = mpi->timeout();
    mpi->set_timeout(std::chrono::milliseconds(200));
    WorkPtr b = g->barrier();
    mpi->set_timeout(before);
    std::string m = error_of([&] { b->wait(); });
    for (int q = 1; q < n; ++q) world()->send(go, members[q], 21)->wait();
    EXPECT_TRUE(has(m, "barrier on " + g->name() + " (collective #")) << m;
    EXPECT_TRUE(has(m, "): not complete after 0.2 s")) << m;
    for (int q = 1; q < n; ++q) {
      EXPECT_TRUE(has(m, "rank " + std::to_string(q) + " (world rank " + std::to_string(members[q]) +
                             ") (its latest collective on " + g->name()))
          << m;
    }
    EXPECT_EQ(error_of([&] { b->wait(); }), "(no error)");
  } else {
    // Bounded, so that a barrier that never times out fails the test instead of hanging it.
    auto& world_group = dynamic_cast<MpiProcessGroup&>(*world());
    const std::chrono::milliseconds before = world_group.timeout();
    world_group.set_timeout(std::chrono::seconds(30));
    WorkPtr told = world()->recv(go, members[0], 21);
    world_group.set_timeout(before);
    EXPECT_EQ(error_of([&] { told->wait(); }), "(no error)") << "group rank 0 did not time out";
    g->barrier()->wait();
    told->wait();
  }
  Tensor after = Tensor::full({4}, static_cast<float>(me + 1));
  g->all_reduce(after)->wait();
  const float s = std::accumulate(members.begin(), members.end(), 0.0f) + n;
  EXPECT_EQ(after.to_vector(), std::vector<float>(4, s));
}
