// reduce, gather, scatter and all_to_all under mpirun (np 1-4), on the world and on a proper
// sub-group whose group ranks differ from the world ranks (world ranks n-1, ..., 1), each
// checked against a closed form of inputs that depend on the sending rank's world rank (so
// a block from the wrong rank, or a rank numbered in the world instead of the group, shows),
// for every root, ReduceOp and dtype (f32, i64); then the errors: arguments one rank can
// check, at the call; a rank that never calls (the timeout names the group, the collective
// and the missing rank); ranks that disagree (debug: collectives). Every rank runs every
// test; collectives come before the checks, so a failed EXPECT cannot leave a rank waiting.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "closed_form.h"
#include "comm/dist.h"
#include "comm/mpi_process_group.h"
#include "error_of.h"

using namespace dpt;
using namespace dpt::dist;
using dpt::testing::error_of;
using dpt::testing::expect_values;
using dpt::testing::make;

namespace {

const std::vector<int64_t> kSizes = {0, 1, 7, 100003};
constexpr int64_t kBig = int64_t(1) << 33;  // i64 values beyond 32 bits
const std::vector<ReduceOp> kOps = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max};

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

MpiProcessGroup& as_mpi(const GroupPtr& group) {
  auto* mpi = dynamic_cast<MpiProcessGroup*>(group.get());
  if (!mpi) throw std::runtime_error(group->name() + " is not an MpiProcessGroup");
  return *mpi;
}

// World ranks 1..n-1, with group rank k at world rank n-1-k; null on world rank 0 (and at
// np 1). Made once, by the first test that asks, on every rank alike.
GroupPtr reversed_tail() {
  static GroupPtr group = [] {
    const int me = info().rank;
    return split(world(), me == 0 ? -1 : 0, -me);
  }();
  return group;
}

// Runs `body` on the world, then on reversed_tail() on its members.
void for_each_group(const std::function<void(const GroupPtr&)>& body) {
  GroupPtr tail = reversed_tail();
  body(world());
  if (tail) body(tail);
}

// The world rank of group rank r, plus one: what a rank contributes, so that 0 never does.
int64_t w1(const GroupPtr& g, int r) { return g->world_ranks()[r] + 1; }

std::string at(const GroupPtr& g, const std::string& what) {
  return what + " on " + g->name() + " (rank " + std::to_string(g->rank()) + ")";
}

}  // namespace

TEST(MpiMoreCollectives, ReduceToEveryRootWithEveryOp) {
  for_each_group([](const GroupPtr& g) {
    const int n = g->size(), me = g->rank();
    int64_t sum = 0, lo = w1(g, 0), hi = w1(g, 0);
    for (int r = 0; r < n; ++r) {
      sum += w1(g, r);
      lo = std::min(lo, w1(g, r));
      hi = std::max(hi, w1(g, r));
    }
    // Rank r contributes w1(r) + i % 101 (f32) and w1(r) * kBig + i (i64).
    auto f32 = [&](int64_t i) { return w1(g, me) + i % 101; };
    auto i64 = [&](int64_t i) { return w1(g, me) * kBig + i; };
    for (int root = 0; root < n; ++root) {
      for (int64_t size : kSizes) {
        std::vector<Tensor> fs, ls;
        std::vector<WorkPtr> works;
        for (ReduceOp op : kOps) {
          fs.push_back(make<float>(size, f32));
          ls.push_back(make<int64_t>(size, i64));
          works.push_back(g->reduce(fs.back(), root, op));
          works.push_back(g->reduce(ls.back(), root, op));
        }
        for (const auto& work : works) work->wait();
        for (size_t k = 0; k < kOps.size(); ++k) {
          const std::string what = at(g, std::string("reduce(") + reduce_op_name(kOps[k]) + ") to root " +
                                             std::to_string(root) + " at n " + std::to_string(size));
          if (me != root) {  // only read
            expect_values<float>(fs[k], f32, what + ", f32 left as it was");
            expect_values<int64_t>(ls[k], i64, what + ", i64 left as it was");
            continue;
          }
          auto f32_of = [&](int64_t i) -> float {
            switch (kOps[k]) {
              case ReduceOp::sum:
                return static_cast<float>(sum + n * (i % 101));
              case ReduceOp::avg:
                return static_cast<float>(sum + n * (i % 101)) / n;
              case ReduceOp::min:
                return static_cast<float>(lo + i % 101);
              case ReduceOp::max:
                return static_cast<float>(hi + i % 101);
            }
            return 0;
          };
          auto i64_of = [&](int64_t i) -> int64_t {
            switch (kOps[k]) {
              case ReduceOp::sum:
                return sum * kBig + n * i;
              case ReduceOp::avg:
                return (sum * kBig + n * i) / n;
              case ReduceOp::min:
                return lo * kBig + i;
              case ReduceOp::max:
                return hi * kBig + i;
            }
            return 0;
          };
          expect_values<float>(fs[k], f32_of, what + ", f32");
          expect_values<int64_t>(ls[k], i64_of, what + ", i64");
        }
      }
    }
  });
}

TEST(MpiMoreCollectives, GatherToEveryRoot) {
  for_each_group([](const GroupPtr& g) {
    const int n = g->size(), me = g->rank();
    for (int root = 0; root < n; ++root) {
      for (int64_t m : kSizes) {
        // On other ranks `out` is not used: odd ranks pass none, even ones a poisoned
        // tensor that must stay as it is.
        const bool pass_out = me == root || me % 2 == 0;
        Tensor out = pass_out ? make<float>(n * m, [](int64_t) { return -1; }) : Tensor();
        Tensor out64 = pass_out ? make<int64_t>(n * m, [](int64_t) { return -1; }) : Tensor();
        Tensor in = make<float>(m, [&](int64_t i) { return w1(g, me) * 1000 + i % 1000; });
        Tensor in64 = make<int64_t>(m, [&](int64_t i) { return w1(g, me) * kBig + i; });
        WorkPtr a = g->gather(out, in, root), b = g->gather(out64, in64, root);
        b->wait();
        EXPECT_TRUE(a->is_completed()) << "completion in call order";
        const std::string what =
            at(g, "gather to root " + std::to_string(root) + " at m " + std::to_string(m));
        if (me == root) {
          // Element k of out is element k % m of group rank k / m's in.
          expect_values<float>(
              out, [&](int64_t k) { return w1(g, k / m) * 1000 + (k % m) % 1000; }, what + ", f32");
          expect_values<int64_t>(
              out64, [&](int64_t k) { return w1(g, k / m) * kBig + k % m; }, what + ", i64");
        } else if (pass_out) {
          expect_values<float>(
              out, [](int64_t) { return -1; }, what + ", out of a non-root untouched");
        }
      }
    }
  });
}

TEST(MpiMoreCollectives, ScatterFromEveryRoot) {
  for_each_group([](const GroupPtr& g) {
    const int n = g->size(), me = g->rank();
    for (int root = 0; root < n; ++root) {
      for (int64_t m : kSizes) {
        // Root's in: element k is 2k + its world rank (f32), k * kBig + its world rank (i64).
        // Elsewhere `in` is not used: odd ranks pass none, even ones a tensor that stays.
        const bool pass_in = me == root || me % 2 == 0;
        auto whole = [&](int64_t k) { return 2 * k + w1(g, me); };
        auto whole64 = [&](int64_t k) { return k * kBig + w1(g, me); };
        Tensor in = pass_in ? make<float>(n * m, whole) : Tensor();
        Tensor in64 = pass_in ? make<int64_t>(n * m, whole64) : Tensor();
        Tensor out = make<float>(m, [](int64_t) { return -1; });
        Tensor out64 = make<int64_t>(m, [](int64_t) { return -1; });
        WorkPtr a = g->scatter(out, in, root), b = g->scatter(out64, in64, root);
        a->wait();
        b->wait();
        const std::string what =
            at(g, "scatter from root " + std::to_string(root) + " at m " + std::to_string(m));
        const int64_t first = me * m;  // this rank's block of root's in
        expect_values<float>(
            out, [&](int64_t i) { return 2 * (first + i) + w1(g, root); }, what + ", f32");
        expect_values<int64_t>(
            out64, [&](int64_t i) { return (first + i) * kBig + w1(g, root); }, what + ", i64");
        if (pass_in) expect_values<float>(in, whole, what + ", in untouched");
      }
    }
  });
}

namespace {

// Element j of the block that group rank `from` sends group rank `to`: both world ranks and
// j, exact in f32 (at most 63 + 64 * 4095 < 2^24).
int64_t block_value(const GroupPtr& g, int from, int to, int64_t j) {
  return g->world_ranks()[from] * 16 + g->world_ranks()[to] + 64 * (j % 4096);
}

// all_to_all with rank `from` sending count(from, to) elements to rank `to` (empty splits:
// equal ones, count(from, to) the same for every pair), in f32 and i64, checked.
void check_all_to_all(const GroupPtr& g, const std::function<int64_t(int, int)>& count, bool pass_splits,
                      const std::string& what) {
  const int n = g->size(), me = g->rank();
  std::vector<int64_t> in_splits(n), out_splits(n), out_offsets(n + 1, 0);
  for (int r = 0; r < n; ++r) {
    in_splits[r] = count(me, r);
    out_splits[r] = count(r, me);
    out_offsets[r + 1] = out_offsets[r] + out_splits[r];
  }
  // in: the blocks for ranks 0, 1, ... in order.
  std::vector<int> in_owner;  // the rank element k of in goes to, and its index in the block
  std::vector<int64_t> in_index;
  for (int r = 0; r < n; ++r) {
    for (int64_t j = 0; j < in_splits[r]; ++j) {
      in_owner.push_back(r);
      in_index.push_back(j);
    }
  }
  const auto in_n = static_cast<int64_t>(in_owner.size());
  auto sent = [&](int64_t k) { return block_value(g, me, in_owner[k], in_index[k]); };
  Tensor in = make<float>(in_n, sent), out = make<float>(out_offsets[n], [](int64_t) { return -1; });
  Tensor in64 = make<int64_t>(in_n, [&](int64_t k) { return sent(k) * kBig - 5; });
  Tensor out64 = make<int64_t>(out_offsets[n], [](int64_t) { return -1; });
  const std::vector<int64_t> none;
  WorkPtr a = g->all_to_all(out, in, pass_splits ? out_splits : none, pass_splits ? in_splits : none);
  WorkPtr b = g->all_to_all(out64, in64, pass_splits ? out_splits : none, pass_splits ? in_splits : none);
  b->wait();
  a->wait();
  // Element k of out is element j of the block from rank `from`, where out_offsets[from] <= k.
  auto received = [&](int64_t k) {
    const int from =
        static_cast<int>(std::upper_bound(out_offsets.begin(), out_offsets.end(), k) - out_offsets.begin()) -
        1;
    return block_value(g, from, me, k - out_offsets[from]);
  };
  expect_values<float>(out, received, at(g, what + ", f32"));
  expect_values<int64_t>(
      out64, [&](int64_t k) { return received(k) * kBig - 5; }, at(g, what + ", i64"));
  expect_values<float>(in, sent, at(g, what + ", in untouched"));
}

}  // namespace

TEST(MpiMoreCollectives, AllToAllEqualSplits) {
  for_each_group([](const GroupPtr& g) {
    for (int64_t m : kSizes) {
      auto equal = [m](int, int) { return m; };
      check_all_to_all(g, equal, false, "all_to_all, " + std::to_string(m) + " to each rank");
      check_all_to_all(g, equal, true, "all_to_all, " + std::to_string(m) + " to each rank, splits passed");
    }
  });
}

TEST(MpiMoreCollectives, AllToAllUnevenSplits) {
  for_each_group([](const GroupPtr& g) {
    const int last = g->size() - 1;
    const std::vector<std::pair<std::string, std::function<int64_t(int, int)>>> patterns = {
        {"(from + 2 to) % 5, zeros among them", [](int from, int to) { return (from + 2 * to) % 5; }},
        {"large and different each way", [](int from, int to) { return 20000 + 7919 * from + 104 * to; }},
        {"the last rank sends nothing", [last](int from, int to) { return from == last ? 0 : 3 + to; }},
        {"the last rank receives nothing", [last](int from, int to) { return to == last ? 0 : 1 + from; }},
        {"only to oneself", [](int from, int to) { return from == to ? 11 : 0; }},
        {"nothing at all", [](int, int) { return 0; }},
    };
    for (const auto& [name, count] : patterns) check_all_to_all(g, count, true, "all_to_all, " + name);
  });
}

TEST(MpiMoreCollectives, InCallOrderWithoutWaits) {
  // reduce then broadcast of one tensor is an all_reduce; gather then scatter of what was
  // gathered gives every rank back its own: each later call touches what the earlier one
  // writes, so it must start after it (comm_thread.h), with no wait() between them.
  for_each_group([](const GroupPtr& g) {
    const int n = g->size(), me = g->rank();
    const int root = n - 1;
    int64_t sum = 0;
    for (int r = 0; r < n; ++r) sum += w1(g, r);
    Tensor t = make<float>(1000, [&](int64_t i) { return w1(g, me) + i % 3; });
    Tensor mine = make<float>(5000, [&](int64_t i) { return w1(g, me) * 10000 + i; });
    Tensor all = me == root ? make<float>(n * 5000, [](int64_t) { return -1; }) : Tensor();
    Tensor back = make<float>(5000, [](int64_t) { return -1; });
    std::vector<WorkPtr> works = {g->reduce(t, root), g->broadcast(t, root), g->gather(all, mine, root),
                                  g->scatter(back, all, root)};
    works.back()->wait();
    for (const auto& work : works) EXPECT_TRUE(work->is_completed()) << at(g, "completion out of call order");
    expect_values<float>(
        t, [&](int64_t i) { return sum + n * (i % 3); }, at(g, "reduce then broadcast"));
    expect_values<float>(
        back, [&](int64_t i) { return w1(g, me) * 10000 + i; }, at(g, "gather then scatter"));
  });
}

TEST(MpiMoreCollectives, ErrorsAtTheCall) {
  // What one rank can check is an Error at the call on that rank, before anything is sent.
  for_each_group([](const GroupPtr& g) {
    const int n = g->size(), me = g->rank();
    const std::string on = " on " + g->name() + ": ";
    std::string m = error_of([&] { g->reduce(Tensor::zeros({3}), n); });
    EXPECT_TRUE(has(m, "reduce" + on + "root " + std::to_string(n) + " is not a rank of this group of " +
                           std::to_string(n)))
        << m;
    m = error_of([&] { g->gather(Tensor::zeros({3 * n}), Tensor::zeros({3}), -1); });
    EXPECT_TRUE(has(m, "gather" + on + "root -1 is not a rank of this group")) << m;
    // Root's whole tensor must hold one block per rank.
    m = error_of([&] { g->gather(Tensor::zeros({3 * n + 1}), Tensor::zeros({3}), me); });
    EXPECT_TRUE(has(m, "gather" + on + "root " + std::to_string(me) + "'s out must hold " +
                           std::to_string(n) + " x 3 = " + std::to_string(3 * n) +
                           " elements (a block of in's size per rank), got " + std::to_string(3 * n + 1)))
        << m;
    m = error_of([&] { g->gather(Tensor(), Tensor::zeros({3}), me); });
    EXPECT_TRUE(has(m, "gather" + on + "out is an undefined tensor")) << m;
    m = error_of([&] { g->scatter(Tensor::zeros({2}), Tensor::zeros({2 * n - 1}), me); });
    EXPECT_TRUE(has(m, "scatter" + on + "root " + std::to_string(me) + "'s in must hold " +
                           std::to_string(n) + " x 2 = " + std::to_string(2 * n) +
                           " elements (a block of out's size per rank), got " + std::to_string(2 * n - 1)))
        << m;
    m = error_of([&] { g->scatter(Tensor::zeros({2}), Tensor::zeros({2 * n}, DType::i64), me); });
    EXPECT_TRUE(has(m, "scatter" + on + "in is i64 but out is f32")) << m;
    Tensor storage = Tensor::zeros({4 * n});
    m = error_of([&] { g->gather(storage, storage.as_strided({4}, {1}, 0), me); });
    EXPECT_TRUE(has(m, "gather" + on + "out overlaps in")) << m;
    // bf16 only moves through MPI (gather, scatter, ...); a reduction needs f32 or i64.
    m = error_of([&] { g->reduce(Tensor::zeros({4}, DType::bf16), me); });
    EXPECT_TRUE(has(m, "reduce" + on + "the tensor has dtype bf16; the MPI backend supports f32 and i64")) << m;

    // all_to_all: splits that one rank can see are wrong.
    if (n > 1) {
      m = error_of([&] { g->all_to_all(Tensor::zeros({n + 1}), Tensor::zeros({n + 1})); });
      EXPECT_TRUE(has(m, "all_to_all" + on + "out has " + std::to_string(n + 1) +
                             " elements, which do not split equally over " + std::to_string(n) + " ranks"))
          << m;
    }
    m = error_of(
        [&] { g->all_to_all(Tensor::zeros({n}), Tensor::zeros({n}), {}, std::vector<int64_t>(n + 1, 0)); });
    EXPECT_TRUE(has(m, "all_to_all" + on + std::to_string(n + 1) + " in splits for a group of " +
                           std::to_string(n) + " ranks (one per rank)"))
        << m;
    std::vector<int64_t> ones(n, 1);
    m = error_of([&] { g->all_to_all(Tensor::zeros({n}), Tensor::zeros({n + 2}), ones, ones); });
    EXPECT_TRUE(has(m, "all_to_all" + on + "the in splits add up to " + std::to_string(n) +
                           " elements, but in has " + std::to_string(n + 2)))
        << m;
    std::vector<int64_t> negative = ones;
    negative[0] = -1;  // checked before the sum
    m = error_of([&] { g->all_to_all(Tensor::zeros({n}), Tensor::zeros({n}), negative, ones); });
    EXPECT_TRUE(has(m, "all_to_all" + on + "out split 0 is -1 (must be >= 0)")) << m;
    std::vector<int64_t> keeps_two = ones;
    keeps_two[me] = 2;
    m = error_of([&] { g->all_to_all(Tensor::zeros({n}), Tensor::zeros({n + 1}), ones, keeps_two); });
    EXPECT_TRUE(has(m, "all_to_all" + on + "rank " + std::to_string(me) +
                           " sends itself 2 elements (in split " + std::to_string(me) +
                           ") but expects 1 (out split " + std::to_string(me) + ")"))
        << m;
    m = error_of([&] { g->all_to_all(Tensor::zeros({n}, DType::i64), Tensor::zeros({n})); });
    EXPECT_TRUE(has(m, "all_to_all" + on + "out is i64 but in is f32")) << m;
    Tensor both = Tensor::zeros({2 * n});
    m = error_of([&] { g->all_to_all(both.as_strided({n}, {1}, 0), both.as_strided({n}, {1}, n - 1)); });
    if (n > 1) {
      EXPECT_TRUE(has(m, "all_to_all" + on + "out overlaps in")) << m;
    }

    // A size only one rank gets wrong is caught on that rank; the others go on.
    if (n > 1 && me == 1) {
      m = error_of([&] { g->gather(Tensor::zeros({2 * n}), Tensor::zeros({3}), 1); });
      EXPECT_TRUE(has(m, "gather" + on + "root 1's out must hold")) << m;
    }
    g->barrier()->wait();  // and the group is still usable
  });
}

namespace {

// The group's timeout for the calls made by `post`, then none again.
WorkPtr with_timeout(const GroupPtr& g, std::chrono::milliseconds timeout,
                     const std::function<WorkPtr()>& post) {
  MpiProcessGroup& mpi = as_mpi(g);
  const std::chrono::milliseconds old = mpi.timeout();
  mpi.set_timeout(timeout);
  WorkPtr work = post();
  mpi.set_timeout(old);
  return work;
}

// "rank 2" on the world, "rank 2 (world rank 1)" on a sub-group: how messages name rank r.
std::string rank_name(const GroupPtr& g, int r) {
  std::string name = "rank " + std::to_string(r);
  if (g->world_ranks()[r] != r) name += " (world rank " + std::to_string(g->world_ranks()[r]) + ")";
  return name;
}

}  // namespace

TEST(MpiMoreCollectives, TimeoutNamesTheGroupTheCollectiveAndTheMissingRank) {
  if (world()->size() < 2) GTEST_SKIP() << "needs a group of 2 or more ranks (np 1 has none)";
  // In each group of two or more, group rank `late` calls the collective only after the
  // others have timed out (a world-wide barrier on a copy of the world tells it when), so
  // they report it; then it comes and the collective completes. The ranks that check the
  // message are the ones MPI cannot let finish without the late rank: the root of a gather
  // or reduce (late is not the root), every rank of a scatter whose root is late, every
  // rank of an all_to_all (each receives from the late rank).
  GroupPtr signal = split(world(), 0, info().rank);
  for_each_group([&](const GroupPtr& g) {
    const int n = g->size(), me = g->rank();
    if (n < 2) return;
    const int late = n - 1;
    struct Call {
      std::string text;  // how the error names it
      bool must_wait;    // on this rank, while `late` is away
      std::function<WorkPtr()> post;
      std::function<void()> check;
    };
    Tensor r = make<float>(5, [&](int64_t i) { return w1(g, me) + i; });
    Tensor gathered = make<float>(5 * n, [](int64_t) { return -1; }),
           mine = make<float>(5, [&](int64_t) { return w1(g, me); });
    Tensor whole = make<float>(4 * n, [&](int64_t k) { return k + w1(g, me); }), part = Tensor::zeros({4});
    Tensor sent = make<float>(2 * n, [&](int64_t) { return w1(g, me); }), got = Tensor::zeros({2 * n});
    int64_t hi = 0;
    for (int k = 0; k < n; ++k) hi = std::max(hi, w1(g, k));
    const std::vector<Call> calls = {
        {"reduce(max) of 5 f32 to rank 0", me == 0, [&] { return g->reduce(r, 0, ReduceOp::max); },
         [&] {
           if (me == 0)
             expect_values<float>(
                 r, [&](int64_t i) { return hi + i; }, at(g, "late reduce"));
         }},
        {"gather of 5 f32 per rank to rank 0", me == 0, [&] { return g->gather(gathered, mine, 0); },
         [&] {
           if (me == 0)
             expect_values<float>(
                 gathered, [&](int64_t k) { return w1(g, k / 5); }, at(g, "late gather"));
         }},
        {"scatter of 4 f32 per rank from rank " + std::to_string(late), true,
         [&] { return g->scatter(part, whole, late); },
         [&] {
           expect_values<float>(
               part, [&](int64_t i) { return 4 * me + i + w1(g, late); }, at(g, "late scatter"));
         }},
        {"all_to_all of f32 (rank " + std::to_string(me) + " sends " + std::to_string(2 * n) + ", receives " +
             std::to_string(2 * n) + ")",
         true, [&] { return g->all_to_all(got, sent); },
         [&] {
           expect_values<float>(
               got, [&](int64_t k) { return w1(g, k / 2); }, at(g, "late all_to_all"));
         }},
    };
    for (const Call& call : calls) {
      if (me == late) {
        signal->barrier()->wait();
        call.post()->wait();
      } else {
        WorkPtr work = with_timeout(g, std::chrono::milliseconds(300), call.post);
        if (call.must_wait) {
          std::string m = error_of([&] { work->wait(); });
          EXPECT_TRUE(has(m, call.text + " on " + g->name() + " (collective #")) << m;
          EXPECT_TRUE(has(m, "): not complete after 0.3 s")) << m;
          EXPECT_TRUE(
              has(m, "; did not arrive: " + rank_name(g, late) + " (its latest collective on " + g->name()))
              << m;
        }
        signal->barrier()->wait();
        while (!work->is_completed()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        work->wait();
      }
      call.check();
    }
  });
  // The rank outside the sub-group takes part in its signals, one per call above.
  if (!reversed_tail() && world()->size() > 2)
    for (int k = 0; k < 4; ++k) signal->barrier()->wait();
}

namespace {

// Debug mode on `group` for one test, off again however the test ends.
struct DebugOn {
  explicit DebugOn(const GroupPtr& g) : group(g) { as_mpi(group).set_debug_collectives(true); }
  ~DebugOn() { as_mpi(group).set_debug_collectives(false); }
  GroupPtr group;
};

}  // namespace

TEST(MpiMoreCollectives, DebugCollectivesCatchesRanksThatDisagree) {
  if (world()->size() < 2) GTEST_SKIP() << "needs a group of 2 or more ranks (np 1 has none)";
  // The last rank of each group calls something else; every rank gets the error naming it,
  // nothing is sent, and the group goes on working (checked by a correct all_to_all).
  for_each_group([](const GroupPtr& g) {
    const int n = g->size(), me = g->rank();
    if (n < 2) return;
    DebugOn debug(g);
    const int odd = n - 1;
    const std::string prefix = " differs between ranks (debug: collectives): " + rank_name(g, 0) + " calls ";
    const std::string who = ", " + rank_name(g, odd) + " calls ";

    std::string m = error_of([&] { g->reduce(Tensor::zeros({me == odd ? 11 : 10}), 0); });
    EXPECT_TRUE(has(m, g->name() + ": collective #")) << m;
    EXPECT_TRUE(has(m, prefix + "reduce(sum) of 10 f32 to rank 0" + who + "reduce(sum) of 11 f32 to rank 0"))
        << m;

    m = error_of([&] { g->gather(Tensor::zeros({4 * n}), Tensor::zeros({4}), me == odd ? 1 : 0); });
    EXPECT_TRUE(
        has(m, prefix + "gather of 4 f32 per rank to rank 0" + who + "gather of 4 f32 per rank to rank 1"))
        << m;

    m = error_of([&] {
      g->scatter(Tensor::zeros({me == odd ? 2 : 3}), me == 0 ? Tensor::zeros({3 * n}) : Tensor(), 0);
    });
    EXPECT_TRUE(has(
        m, prefix + "scatter of 3 f32 per rank from rank 0" + who + "scatter of 2 f32 per rank from rank 0"))
        << m;

    m = error_of([&] {
      if (me == odd) {
        g->scatter(Tensor::zeros({4}), Tensor(), 0);
      } else {
        g->gather(Tensor::zeros({4 * n}), Tensor::zeros({4}), 0);
      }
    });
    EXPECT_TRUE(
        has(m, prefix + "gather of 4 f32 per rank to rank 0" + who + "scatter of 4 f32 per rank from rank 0"))
        << m;

    m = error_of([&] {
      g->all_to_all(Tensor::zeros({n}, me == odd ? DType::i64 : DType::f32),
                    Tensor::zeros({n}, me == odd ? DType::i64 : DType::f32));
    });
    EXPECT_TRUE(has(m, prefix + "all_to_all of f32" + who + "all_to_all of i64")) << m;

    // Splits that each rank finds fine alone: the last rank expects 3 elements from rank 0,
    // which sends it 2 (as to everyone).
    std::vector<int64_t> in_splits(n, 2), out_splits(n, 2);
    if (me == odd) out_splits[0] = 3;
    const int64_t out_n = 2 * n + (me == odd ? 1 : 0);
    m = error_of(
        [&] { g->all_to_all(Tensor::zeros({out_n}), Tensor::zeros({2 * n}), out_splits, in_splits); });
    EXPECT_TRUE(has(m, g->name() + ": collective #")) << m;
    EXPECT_TRUE(
        has(m, " all_to_all of f32: the ranks' splits do not match (debug: collectives): " + rank_name(g, 0) +
                   " sends 2 elements to " + rank_name(g, odd) + ", which expects 3 from it"))
        << m;

    // Splits that agree pass the check, and the exchange is right.
    check_all_to_all(
        g, [](int from, int to) { return (3 * from + to) % 4; }, true, "all_to_all under debug: collectives");
  });
}
