// Waiting in MPI tests without depending on the machine being idle: on a loaded machine any
// rank may be descheduled for a second or more, so a test orders its ranks with messages,
// not with sleeps, and every wait has a generous bound that turns a hang into a failure.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "comm/dist.h"

namespace dpt::testing {

// How long a collective that should complete may take on a loaded 2-core machine before a
// test calls it hung: far beyond any real delay (milliseconds when idle), well within CTest's
// 300 s per MPI test.
constexpr std::chrono::seconds kHungAfter{30};

// Polls work.is_completed() (never wait(), so only the group's communication thread can
// progress it) until it is true; false after `limit`.
inline bool completes_without_wait(dist::Work& work, std::chrono::milliseconds limit = kHungAfter) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!work.is_completed()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // leaves the core to the thread
  }
  return true;
}

// Holds the late ranks of a timeout test back until the early ranks have timed out, so the
// test does not depend on the late ranks being slower than the timeout. Collective over the
// world: it makes a group of every rank (a communicator and thread of its own), whose
// barrier is ordered against nothing on the group under test.
class AfterTheTimeouts {
 public:
  AfterTheTimeouts() {
    std::vector<int> everyone(static_cast<size_t>(dist::info().world_size));
    for (size_t r = 0; r < everyone.size(); ++r) everyone[r] = static_cast<int>(r);
    signal_ = dist::new_group(everyone);
  }
  // Early ranks, once their wait() has thrown.
  void timed_out() { signal_->barrier()->wait(); }
  // Late ranks, before they arrive: returns once every early rank called timed_out(), or
  // after `limit` with a failure (the early ranks' timeout did not fire; they then see their
  // collective complete, and their own checks fail). Polls, leaving the cores to them.
  void wait_for_early_ranks(std::chrono::milliseconds limit = kHungAfter) {
    dist::WorkPtr barrier = signal_->barrier();
    EXPECT_TRUE(completes_without_wait(*barrier, limit))
        << "the early ranks did not time out within " << limit.count() << " ms";
  }

 private:
  dist::GroupPtr signal_;
};

}  // namespace dpt::testing
