// Faults a process group reports and survives, on every rank under mpirun -np 2, 3 and 4:
// debug: collectives stops a collective whose arguments differ between ranks at the call, on
// every rank, naming the first rank that differs from rank 0 (and nothing is sent, so the
// group goes on working); a collective that times out names its number and the ranks that
// have not called it. Faults that end the job (signals, exceptions, hangs) are in
// test_faults.cpp and test_train_cli.cpp, which run whole jobs under mpirun.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "comm/dist.h"
#include "comm/mpi_process_group.h"
#include "error_of.h"
#include "mpi_waits.h"

using namespace dpt;
using namespace dpt::dist;
using dpt::testing::error_of;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Tensor filled(int64_t n, float value) {
  return Tensor::from_vector(std::vector<float>(static_cast<size_t>(n), value), {n});
}

MpiProcessGroup& as_mpi(const GroupPtr& group) {
  auto* mpi = dynamic_cast<MpiProcessGroup*>(group.get());
  if (!mpi) throw std::runtime_error(group->name() + " is not an MpiProcessGroup");
  return *mpi;
}

// Debug mode on `group` for one test, off again however the test ends.
struct DebugOn {
  explicit DebugOn(const GroupPtr& g) : group(g) { as_mpi(group).set_debug_collectives(true); }
  ~DebugOn() { as_mpi(group).set_debug_collectives(false); }
  GroupPtr group;
};

}  // namespace

TEST(MpiFaults, DebugCollectivesNamesTheFirstRankThatDiffers) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  if (n == 1) GTEST_SKIP() << "needs two ranks";
  DebugOn debug(w);
  const int odd = n - 1;  // the last rank calls something else; every rank gets the error
  const std::string prefix = " differs between ranks (debug: collectives): rank 0 calls ";
  const std::string who = ", rank " + std::to_string(odd) + " calls ";

  std::string m = error_of([&] { w->all_reduce(filled(r == odd ? 11 : 10, 1)); });
  EXPECT_TRUE(has(m, "world: collective #")) << m;
  EXPECT_TRUE(has(m, prefix + "all_reduce(sum) of 10 f32" + who + "all_reduce(sum) of 11 f32")) << m;

  m = error_of([&] { w->all_reduce(filled(10, 1), r == odd ? ReduceOp::max : ReduceOp::sum); });
  EXPECT_TRUE(has(m, prefix + "all_reduce(sum) of 10 f32" + who + "all_reduce(max) of 10 f32")) << m;

  m = error_of([&] { w->all_reduce(r == odd ? Tensor::zeros({10}, DType::i64) : filled(10, 1)); });
  EXPECT_TRUE(has(m, prefix + "all_reduce(sum) of 10 f32" + who + "all_reduce(sum) of 10 i64")) << m;

  m = error_of([&] { w->broadcast(filled(10, 1), r == odd ? 1 : 0); });
  EXPECT_TRUE(has(m, prefix + "broadcast of 10 f32 from rank 0" + who + "broadcast of 10 f32 from rank 1"))
      << m;

  m = error_of([&] {
    if (r == odd) {
      w->barrier();
    } else {
      w->all_reduce(filled(10, 1));
    }
  });
  EXPECT_TRUE(has(m, prefix + "all_reduce(sum) of 10 f32" + who + "barrier")) << m;

  // Nothing was sent: the same calls everywhere still work, checked.
  Tensor t = filled(1000, static_cast<float>(r + 1));
  w->all_reduce(t)->wait();
  EXPECT_EQ(t.data<float>()[999], n * (n + 1) / 2.0f);
  w->barrier()->wait();
}

TEST(MpiFaults, DebugCollectivesOnASubGroupNamesWorldRanks) {
  const int n = world()->size(), r = world()->rank();
  if (n < 3) GTEST_SKIP() << "needs three ranks";
  std::vector<int> members;
  for (int i = 1; i < n; ++i) members.push_back(i);
  GroupPtr g = new_group(members);  // world ranks 1..n-1: group rank k is world rank k + 1
  if (!g) return;
  DebugOn debug(g);
  const int odd = g->size() - 1;
  std::string m = error_of([&] { g->all_reduce(filled(g->rank() == odd ? 7 : 8, 1)); });
  EXPECT_TRUE(has(m, g->name() + ": collective #1 differs between ranks")) << m;
  EXPECT_TRUE(has(m, "rank 0 (world rank 1) calls all_reduce(sum) of 8 f32, rank " + std::to_string(odd) +
                         " (world rank " + std::to_string(n - 1) + ") calls all_reduce(sum) of 7 f32"))
      << m;
  Tensor t = filled(5, static_cast<float>(r));
  g->all_reduce(t)->wait();
  EXPECT_EQ(t.data<float>()[0], n * (n - 1) / 2.0f);
}

TEST(MpiFaults, TimeoutNamesTheRanksThatDidNotArrive) {
  // Ranks 0 and (with 3 or more) 1 call an all_reduce and give up after 0.3 s; the others
  // come only once both have timed out (AfterTheTimeouts), however slow the machine. Each
  // early rank's message names the collective by number and the late ranks with their latest
  // collective; then the late ranks arrive and it completes.
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  if (n == 1) GTEST_SKIP() << "needs two ranks";
  const int early = n > 2 ? 2 : 1;
  dpt::testing::AfterTheTimeouts after_the_timeouts;
  Tensor before = filled(3, 1);
  w->all_reduce(before)->wait();  // the late ranks' latest collective
  Tensor t = filled(100, static_cast<float>(r + 1));
  if (r < early) {
    MpiProcessGroup& mpi = as_mpi(w);
    const std::chrono::milliseconds old = mpi.timeout();
    mpi.set_timeout(std::chrono::milliseconds(300));
    WorkPtr work = w->all_reduce(t);
    mpi.set_timeout(old);
    std::string m = error_of([&] { work->wait(); });
    after_the_timeouts.timed_out();
    EXPECT_TRUE(has(m, "all_reduce(sum) of 100 f32 on world (collective #")) << m;
    EXPECT_TRUE(has(m, "): not complete after 0.3 s")) << m;
    EXPECT_TRUE(has(m, "; did not arrive: rank " + std::to_string(early) + " (")) << m;
    for (int k = early; k < n; ++k)
      EXPECT_TRUE(has(m, "rank " + std::to_string(k) + " (its latest collective on world: #")) << m;
    EXPECT_TRUE(has(m, " all_reduce(sum) of 3 f32)")) << m;
    EXPECT_FALSE(has(m, "rank 0 (")) << m;
    EXPECT_FALSE(has(m, "no answer")) << m;
    // It stays in flight; the communication thread completes it once the late ranks come.
    EXPECT_TRUE(dpt::testing::completes_without_wait(*work));
    work->wait();
  } else {
    after_the_timeouts.wait_for_early_ranks();
    w->all_reduce(t)->wait();
  }
  EXPECT_EQ(t.data<float>()[0], n * (n + 1) / 2.0f);
}
