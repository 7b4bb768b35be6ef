// The example dpt comes from, checked as it is told: 8 ranks (2 machines x 4 GPUs, here 2
// simulated hosts x 4 processes, or one host), the default group, and the sub-groups of the
// even ranks {0, 2, 4, 6} and the odd ones {1, 3, 5, 7}, whose members have group ranks
// 0, 1, 2, 3 ("rank is relative to the process group"). On each group every collective dpt
// offers runs on rank-dependent inputs and is checked against its closed form. Registered at
// np 8 and on tools/cluster.sh's 2 x 4 (CMakeLists.txt); at any other size it is Skipped.
// DDP on the sub-groups against one process: Ddp.EvenAndOddSubGroupsEachEqualOneProcess.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "closed_form.h"
#include "comm/dist.h"

using namespace dpt;
using namespace dpt::dist;
using dpt::testing::expect_values;
using dpt::testing::make;

namespace {

constexpr int kWorld = 8;
constexpr int64_t kBlock = 5;  // elements per rank in the collectives that move blocks

bool seed_size() { return info().world_size == kWorld; }

// The groups of the example this rank belongs to: the world, then its parity's group.
struct SeedGroups {
  GroupPtr world, even, odd;
  std::vector<GroupPtr> mine() const { return {world, info().rank % 2 == 0 ? even : odd}; }
};

SeedGroups make_groups() {
  // Both are collective over the world: every rank makes both, and is a member of one.
  SeedGroups g{dist::world(), new_group({0, 2, 4, 6}), new_group({1, 3, 5, 7})};
  return g;
}

// Runs `check` for every collective on group g, naming the group and the collective on failure.
int run_every_collective(const GroupPtr& g) {
  const int n = g->size(), r = g->rank();
  const float nf = static_cast<float>(n);
  int checked = 0;
  auto each = [&](const std::string& what, const std::function<void()>& body) {
    SCOPED_TRACE(g->name() + ": " + what);
    body();
    ++checked;
  };

  each("send/recv around the ring", [&] {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    Tensor out = make<float>(kBlock, [&](int64_t i) { return 100 * r + i; });
    Tensor in = Tensor::full({kBlock}, -1.0f);
    WorkPtr sent = g->send(out, next), received = g->recv(in, prev);
    sent->wait();
    received->wait();
    expect_values<float>(
        in, [&](int64_t i) { return 100 * prev + i; }, "received");
  });
  for (int root = 0; root < n; ++root)
    each("broadcast from " + std::to_string(root), [&] {
      Tensor t = r == root ? make<float>(kBlock, [&](int64_t i) { return 10 * root + i; })
                           : Tensor::full({kBlock}, -1.0f);
      g->broadcast(t, root)->wait();
      expect_values<float>(
          t, [&](int64_t i) { return 10 * root + i; }, "broadcast");
    });
  for (int root = 0; root < n; ++root)
    each("reduce(sum) to " + std::to_string(root), [&] {
      Tensor t = make<float>(kBlock, [&](int64_t i) { return r + 1 + i; });
      g->reduce(t, root)->wait();
      if (r == root)
        expect_values<float>(
            t, [&](int64_t i) { return nf * (nf + 1) / 2 + nf * i; }, "reduced");
      else
        expect_values<float>(
            t, [&](int64_t i) { return r + 1 + i; }, "a non-root's input");
    });
  const std::vector<std::pair<ReduceOp, std::function<float(int64_t)>>> reductions = {
      {ReduceOp::sum, [&](int64_t i) { return (i + 1) * nf * (nf + 1) / 2; }},
      {ReduceOp::avg, [&](int64_t i) { return (i + 1) * (nf + 1) / 2; }},
      {ReduceOp::min, [&](int64_t i) { return static_cast<float>(i + 1); }},
      {ReduceOp::max, [&](int64_t i) { return (i + 1) * nf; }},
  };
  for (const auto& [op, expected] : reductions)
    each(std::string("all_reduce(") + reduce_op_name(op) + ")", [&] {
      Tensor t = make<float>(kBlock, [&](int64_t i) { return (r + 1) * (i + 1); });
      g->all_reduce(t, op)->wait();
      expect_values<float>(t, expected, "all-reduced");
    });
  for (int root = 0; root < n; ++root)
    each("gather to " + std::to_string(root), [&] {
      Tensor in = make<float>(kBlock, [&](int64_t i) { return 100 * r + i; });
      Tensor out = r == root ? Tensor::full({n * kBlock}, -1.0f) : Tensor();
      g->gather(out, in, root)->wait();
      if (r == root)
        expect_values<float>(
            out, [&](int64_t e) { return 100 * (e / kBlock) + e % kBlock; }, "gathered");
    });
  for (int root = 0; root < n; ++root)
    each("scatter from " + std::to_string(root), [&] {
      Tensor in = r == root
                      ? make<float>(n * kBlock, [&](int64_t e) { return 100 * (e / kBlock) + e % kBlock; })
                      : Tensor();
      Tensor out = Tensor::full({kBlock}, -1.0f);
      g->scatter(out, in, root)->wait();
      expect_values<float>(
          out, [&](int64_t i) { return 100 * r + i; }, "scattered");
    });
  const int64_t total = 3 * n + 1;  // does not divide: chunk_of gives the first rank one more
  const Chunk mine = chunk_of(total, n, r);
  each("all_gather of uneven chunks", [&] {
    Tensor in = make<float>(mine.end - mine.begin, [&](int64_t i) { return 2 * (mine.begin + i) + 1; });
    Tensor out = Tensor::full({total}, -1.0f);
    g->all_gather(out, in)->wait();
    expect_values<float>(
        out, [&](int64_t e) { return 2 * e + 1; }, "all-gathered");
  });
  each("reduce_scatter(sum) of uneven chunks", [&] {
    Tensor in = make<float>(total, [&](int64_t e) { return (r + 1) * (e + 1); });
    Tensor out = Tensor::full({mine.end - mine.begin}, -1.0f);
    g->reduce_scatter(out, in)->wait();
    expect_values<float>(
        out, [&](int64_t i) { return (mine.begin + i + 1) * nf * (nf + 1) / 2; }, "reduce-scattered");
  });
  each("all_to_all", [&] {
    // Block j of rank r's input goes to rank j; block k of its output comes from rank k.
    Tensor in = make<float>(n * kBlock, [&](int64_t e) { return 100 * r + 10 * (e / kBlock) + e % kBlock; });
    Tensor out = Tensor::full({n * kBlock}, -1.0f);
    g->all_to_all(out, in)->wait();
    expect_values<float>(
        out, [&](int64_t e) { return 100 * (e / kBlock) + 10 * r + e % kBlock; }, "exchanged");
  });
  each("barrier", [&] { g->barrier()->wait(); });
  return checked;
}

}  // namespace

TEST(SeedWorld, GroupRanksAreRelativeToTheGroup) {
  if (!seed_size()) GTEST_SKIP() << "the example has 8 ranks; this run has " << info().world_size;
  const int me = info().rank;
  SeedGroups g = make_groups();
  EXPECT_EQ(g.world->size(), kWorld);
  EXPECT_EQ(g.world->rank(), me);
  // The example's table: world rank -> (even group rank, odd group rank); -1: not a member.
  const int even_rank[kWorld] = {0, -1, 1, -1, 2, -1, 3, -1};
  const int odd_rank[kWorld] = {-1, 0, -1, 1, -1, 2, -1, 3};
  for (const auto& [group, table, members] : {std::tuple{g.even, even_rank, std::vector<int>{0, 2, 4, 6}},
                                              std::tuple{g.odd, odd_rank, std::vector<int>{1, 3, 5, 7}}}) {
    if (table[me] < 0) {
      EXPECT_EQ(group, nullptr) << "rank " << me << " got a group it is not a member of";
      continue;
    }
    ASSERT_NE(group, nullptr);
    EXPECT_EQ(group->size(), 4);
    EXPECT_EQ(group->rank(), table[me]);
    EXPECT_EQ(group->world_ranks(), members);
  }
  // Two hosts x 4 (cluster.sh) or one host: the world's hosts as the launcher laid them out.
  EXPECT_TRUE(info().node_count == 1 || info().node_count == 2);
  if (info().node_count == 2) {
    EXPECT_EQ(info().node, me / 4);
    EXPECT_EQ(info().local_rank, me % 4);
  }
}

TEST(SeedWorld, EveryCollectiveOnEveryGroupMatchesItsClosedForm) {
  if (!seed_size()) GTEST_SKIP() << "the example has 8 ranks; this run has " << info().world_size;
  SeedGroups g = make_groups();
  int checked = 0;
  for (const GroupPtr& group : g.mine()) checked += run_every_collective(group);
  // World (n = 8): 1 + 8 + 8 + 4 + 8 + 8 + 3 + 1 = 41; a parity group (n = 4): 25.
  EXPECT_EQ(checked, 41 + 25);
}
