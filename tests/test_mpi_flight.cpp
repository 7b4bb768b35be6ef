// The flight recorder across ranks, at np 2, 3 and 4: the last rank stalls before an
// all_reduce that the others call under a 0.3 s timeout. Every rank's dump must be written
// (the early ranks' by their timeout, the late rank's when they ask it what it did), with
// the stalled call started on the early ranks and absent on the late one, whose last call
// is completed. Then SIGUSR2 rewrites each rank's dump with the call completed, and the run
// goes on.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/tensor.h"
#include "comm/dist.h"
#include "comm/flight_recorder.h"
#include "comm/mpi_process_group.h"
#include "error_of.h"
#include "mpi_waits.h"

using namespace dpt;
using namespace dpt::dist;

namespace {

Tensor filled(int64_t n, float value) {
  return Tensor::from_vector(std::vector<float>(static_cast<size_t>(n), value), {n});
}

nlohmann::json read_dump(const std::string& dir, int rank) {
  std::ifstream in(dir + "/rank-" + std::to_string(rank) + ".json");
  if (!in) return nullptr;
  return nlohmann::json::parse(in);
}

const nlohmann::json& world_entries(const nlohmann::json& dump) {
  for (const auto& g : dump["groups"])
    if (g["group"] == "world") return g["entries"];
  throw std::runtime_error("no world group in the dump");
}

// One directory for the job: rank 0's pid, told to every rank.
std::string job_dir(const GroupPtr& w) {
  Tensor pid = Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(getpid())}, {1});
  w->broadcast(pid, 0)->wait();
  return (std::filesystem::temp_directory_path() /
          ("dpt-flight-test-" + std::to_string(pid.data<int64_t>()[0])))
      .string();
}

}  // namespace

TEST(MpiFlight, EveryRankDumpsOnATimeoutAndOnSigusr2) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank(), late = n - 1;
  if (n == 1) GTEST_SKIP() << "needs two ranks";
  const std::string dir = job_dir(w);
  set_flight_dir(dir);
  dpt::testing::AfterTheTimeouts after_the_timeouts;
  Tensor before = filled(3, 1);
  w->all_reduce(before)->wait();
  Tensor t = filled(100, 1);
  if (r != late) {
    auto& mpi = dynamic_cast<MpiProcessGroup&>(*w);
    const std::chrono::milliseconds old = mpi.timeout();
    mpi.set_timeout(std::chrono::milliseconds(300));
    WorkPtr work = w->all_reduce(t);
    mpi.set_timeout(old);
    const std::string m = dpt::testing::error_of([&] { work->wait(); });
    EXPECT_NE(m.find("; flight record: " + dir + "/rank-" + std::to_string(r) + ".json"), std::string::npos)
        << m;
    after_the_timeouts.timed_out();
    work->wait();
  } else {
    after_the_timeouts.wait_for_early_ranks();
    // Every early rank has its answers, so every dump is on disk.
    const nlohmann::json mine = read_dump(dir, late);
    ASSERT_FALSE(mine.is_null()) << "no dump from the late rank";
    const auto& last = world_entries(mine).back();
    EXPECT_EQ(last["state"], "completed");
    EXPECT_EQ(last["count"], 3);
    const int64_t stalled = last["seq"].get<int64_t>() + 1;
    for (int k = 0; k < late; ++k) {
      const nlohmann::json d = read_dump(dir, k);
      ASSERT_FALSE(d.is_null()) << "no dump from rank " << k;
      EXPECT_EQ(d["rank"], k);
      EXPECT_EQ(d["world_size"], n);
      const auto& e = world_entries(d).back();
      EXPECT_EQ(e["seq"], stalled) << d.dump();
      EXPECT_EQ(e["op"], "all_reduce");
      EXPECT_EQ(e["count"], 100);
      EXPECT_EQ(e["state"], "started");
      EXPECT_EQ(world_entries(d)[world_entries(d).size() - 2]["state"], "completed");
    }
    w->all_reduce(t)->wait();
  }
  EXPECT_EQ(t.data<float>()[0], static_cast<float>(n));
  // SIGUSR2: the signal thread rewrites this rank's dump; the run goes on.
  raise(SIGUSR2);
  const auto until = std::chrono::steady_clock::now() + dpt::testing::kHungAfter;
  nlohmann::json d;
  while ((d = read_dump(dir, r)).is_null() || d["reason"] != "SIGUSR2") {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "no dump after SIGUSR2";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(world_entries(d).back()["state"], "completed");
  EXPECT_EQ(world_entries(d).back()["count"], 100);
  w->barrier()->wait();  // every rank has read its own before rank 0 removes them
  if (r == 0) std::filesystem::remove_all(dir);
}
