// The watchdog's thread sleeps on a condition variable while nothing is watched, and polls
// every `interval` otherwise: a CUDA event query costs about a microsecond, so a step's few
// dozen collectives cost nothing measurable.
#include "comm/watchdog.h"

#include <sys/prctl.h>

#include <algorithm>
#include <exception>

#include "comm/dist.h"

namespace dpt::dist {

Watchdog::Watchdog(Failure on_failure, std::chrono::milliseconds interval)
    : interval_(interval), on_failure_(std::move(on_failure)), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::watch(Watched w) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const Clock::time_point deadline =
        w.timeout.count() > 0 ? Clock::now() + w.timeout : Clock::time_point::max();
    incoming_.push_back({std::move(w), deadline, false});
    ++count_;
  }
  cv_.notify_all();
}

size_t Watchdog::watched() {
  std::lock_guard<std::mutex> lock(mutex_);
  return count_;
}

Watchdog::Failure Watchdog::set_on_failure(Failure on_failure) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::swap(on_failure, on_failure_);
  return on_failure;
}

void Watchdog::run() {
  prctl(PR_SET_NAME, "dpt-watchdog", 0UL, 0UL, 0UL);  // as top -H and /proc name it
  std::vector<Entry> entries;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (entries.empty())
        cv_.wait(lock, [&] { return stopping_ || !incoming_.empty(); });
      else
        cv_.wait_for(lock, interval_, [&] { return stopping_; });
      if (stopping_) return;
      for (Entry& e : incoming_) entries.push_back(std::move(e));
      incoming_.clear();
    }
    poll(entries);
  }
}

void Watchdog::poll(std::vector<Entry>& entries) {
  const Clock::time_point now = Clock::now();
  std::string failure;
  for (Entry& e : entries) {
    const Watched& w = e.w;
    const auto what = [&] { return w.describe ? w.describe() : std::string("a collective"); };
    try {
      e.done = w.work->is_completed();
      if (!e.done && now >= e.deadline) failure = what() + timeout_text(w.timeout) + (w.detail ? w.detail() : "");
    } catch (const std::exception& error) {
      failure = what() + ": " + error.what();
    }
    if (!failure.empty()) {
      if (w.abort) w.abort();
      break;
    }
    if (e.done && w.completed) w.completed();
  }
  if (failure.empty())
    std::erase_if(entries, [](const Entry& e) { return e.done; });
  else
    entries.clear();  // reported once: the job ends, or a test goes on without them
  Failure on_failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    count_ = entries.size() + incoming_.size();
    if (!failure.empty()) on_failure = on_failure_;
  }
  if (on_failure) on_failure(failure);
}

Watchdog& process_watchdog() {
  // Never destroyed: its thread may be polling while static destructors run at exit.
  static Watchdog* watchdog = new Watchdog([](const std::string& message) { abort_all("error: " + message, 1); });
  return *watchdog;
}

}  // namespace dpt::dist
