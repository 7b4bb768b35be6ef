// The watchdog on its own (no MPI, no GPU): the deadline rule that NCCL collectives live by,
// checked with works whose completion the test controls. Completed work is marked once and
// never reported; work past its deadline is aborted, then reported with its own text, once;
// a backend error is reported before the deadline; work without a deadline waits as long
// as it takes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "comm/watchdog.h"

using namespace dpt::dist;
using namespace std::chrono_literals;

namespace {

class FakeWork final : public Work {
 public:
  std::atomic<bool> done{false}, broken{false};
  void wait() override {}
  bool is_completed() override {
    if (broken) throw dpt::Error("NCCL group world failed: remote process exited");
    return done;
  }
};

struct Failures {
  std::mutex mutex;
  std::vector<std::string> messages;
  std::chrono::steady_clock::time_point at;
  void add(const std::string& m) {
    std::lock_guard<std::mutex> lock(mutex);
    messages.push_back(m);
    at = std::chrono::steady_clock::now();
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return messages.size();
  }
};

// Polls `pred` for up to 5 s.
template <class Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

}  // namespace

TEST(Watchdog, CompletedWorkIsMarkedOnceAndNeverReported) {
  Failures failures;
  Watchdog dog([&](const std::string& m) { failures.add(m); }, 5ms);
  std::vector<std::shared_ptr<FakeWork>> works;
  std::atomic<int> completed{0};
  for (int i = 0; i < 3; ++i) {
    works.push_back(std::make_shared<FakeWork>());
    dog.watch({works.back(), 10s, [&] { ++completed; }, [] { return "x"; }, nullptr, nullptr});
  }
  EXPECT_EQ(dog.watched(), 3u);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(completed, 0);  // not complete yet: still watched
  for (auto& w : works) w->done = true;
  ASSERT_TRUE(eventually([&] { return dog.watched() == 0; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(completed, 3);
  EXPECT_EQ(failures.count(), 0u);
}

TEST(Watchdog, WorkPastItsDeadlineIsAbortedThenReportedWithItsTextOnce) {
  Failures failures;
  Watchdog dog([&](const std::string& m) { failures.add(m); }, 5ms);
  auto stuck = std::make_shared<FakeWork>();
  auto fine = std::make_shared<FakeWork>();
  std::atomic<bool> aborted{false}, aborted_before_report{false}, completed{false};
  const auto start = std::chrono::steady_clock::now();
  dog.watch({stuck, 200ms, [&] { completed = true; },
             [] { return std::string("all_reduce(sum) of 4 f32 on world (collective #7)"); },
             [] { return std::string("; rank 1 did not arrive"); },
             [&] {
               aborted_before_report = failures.count() == 0;
               aborted = true;
             }});
  dog.watch({fine, 10s, nullptr, [] { return "other"; }, nullptr, nullptr});
  ASSERT_TRUE(eventually([&] { return failures.count() > 0; }));
  std::this_thread::sleep_for(100ms);  // a second report would come within a few polls
  ASSERT_EQ(failures.count(), 1u);
  EXPECT_EQ(failures.messages[0],
            "all_reduce(sum) of 4 f32 on world (collective #7): not complete after 0.2 s (distributed.timeout_s, "
            "DPT_DIST_TIMEOUT_S); rank 1 did not arrive");
  EXPECT_GE(failures.at - start, 200ms);
  EXPECT_LT(failures.at - start, 2s);
  EXPECT_TRUE(aborted);
  EXPECT_TRUE(aborted_before_report);
  EXPECT_FALSE(completed);
  EXPECT_EQ(dog.watched(), 0u);  // the job ends on a failure: nothing else is reported
}

TEST(Watchdog, ABackendErrorIsReportedBeforeTheDeadline) {
  Failures failures;
  Watchdog dog([&](const std::string& m) { failures.add(m); }, 5ms);
  auto work = std::make_shared<FakeWork>();
  std::atomic<bool> aborted{false};
  const auto start = std::chrono::steady_clock::now();
  dog.watch({work, 60s, nullptr, [] { return std::string("broadcast of 3 f32 from rank 0 on world (collective #2)"); },
             [] { return std::string("; not asked: the backend failed first"); }, [&] { aborted = true; }});
  work->broken = true;
  ASSERT_TRUE(eventually([&] { return failures.count() > 0; }));
  EXPECT_LT(failures.at - start, 5s);
  EXPECT_EQ(failures.messages[0],
            "broadcast of 3 f32 from rank 0 on world (collective #2): NCCL group world failed: remote process exited");
  EXPECT_TRUE(aborted);
}

TEST(Watchdog, WorkWithoutADeadlineWaitsAsLongAsItTakes) {
  Failures failures;
  Watchdog dog([&](const std::string& m) { failures.add(m); }, 2ms);
  auto work = std::make_shared<FakeWork>();
  std::atomic<bool> completed{false};
  dog.watch({work, 0ms, [&] { completed = true; }, nullptr, nullptr, nullptr});
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(failures.count(), 0u);
  EXPECT_EQ(dog.watched(), 1u);
  work->done = true;
  ASSERT_TRUE(eventually([&] { return completed.load(); }));
  EXPECT_EQ(failures.count(), 0u);
}
