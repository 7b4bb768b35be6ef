// The queue, the poll loop and the waiting of comm_thread.h. The loop sleeps between polls
// (PollPolicy) because a spinning progress loop would steal the core that compute runs on.
#include "distributed/comm_thread.h"

#include <sched.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "distributed/mpi_check.h"

namespace dpt::dist {

void CommTask::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  auto done = [&] { return done_.load(std::memory_order_acquire); };
  if (!done()) {
    // thread_ is valid here: the task is not complete, and completing needs mutex_.
    waiters_.fetch_add(1, std::memory_order_relaxed);
    thread_->poke();
    bool finished = true;
    if (timeout_.count() > 0) {
      finished = cv_.wait_for(lock, timeout_, done);
    } else {
      cv_.wait(lock, done);
    }
    waiters_.fetch_sub(1, std::memory_order_relaxed);
    if (!finished) {
      throw Error(describe() + ": not complete after " + std::to_string(timeout_.count() / 1000.0) +
                  " s (DPT_DIST_TIMEOUT_S); did every member of the group call the same collectives in "
                  "the same order?");
    }
  }
  if (!error_.empty()) throw Error(error_);
}

void CommTask::complete() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    thread_ = nullptr;
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

CommThread::CommThread(PollPolicy policy) : policy_(policy), thread_([this] { run(); }) {}

CommThread::~CommThread() {
  try {
    stop(std::chrono::milliseconds(0));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpt: stopping a communication thread: %s\n", e.what());
  }
}

void CommThread::post(const std::shared_ptr<CommTask>& task, std::chrono::milliseconds timeout) {
  task->thread_ = this;
  task->timeout_ = timeout;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    DPT_CHECK(!stopping_) << task->describe() << ": the group's communication thread has stopped "
                          << "(dist::finalize() or the group was destroyed)";
    queue_.push_back(task);
  }
  cv_.notify_one();
}

bool CommThread::stop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopped_) return true;
  stopping_ = true;
  cv_.notify_one();
  auto exited = [&] { return exited_; };
  if (timeout.count() > 0) {
    if (!drained_cv_.wait_for(lock, timeout, exited)) return false;
  } else {
    drained_cv_.wait(lock, exited);
  }
  lock.unlock();
  thread_.join();
  lock.lock();
  stopped_ = true;
  return true;
}

void CommThread::set_poll_policy(const PollPolicy& policy) {
  DPT_CHECK(policy.min_sleep_us >= 0 && policy.max_sleep_us >= policy.min_sleep_us && policy.growth >= 1.0)
      << "PollPolicy needs 0 <= min_sleep_us <= max_sleep_us and growth >= 1, got " << policy.min_sleep_us
      << ", " << policy.max_sleep_us << ", " << policy.growth;
  std::lock_guard<std::mutex> lock(mutex_);
  policy_ = policy;
}

size_t CommThread::pending() {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size() + in_flight_count_;
}

void CommThread::poke() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    poked_ = true;
  }
  cv_.notify_one();
}

bool CommThread::waited() {
  auto is_waited = [](const auto& task) { return task->waiters_.load(std::memory_order_relaxed) > 0; };
  return std::any_of(in_flight_.begin(), in_flight_.end(), is_waited) ||
         std::any_of(waiting_.begin(), waiting_.end(), is_waited);
}

void CommThread::run() {
  // The default 50 us timer slack would round every short back-off sleep up to ~50 us.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  std::unique_lock<std::mutex> lock(mutex_);
  double sleep_us = policy_.min_sleep_us;
  for (;;) {
    if (in_flight_.empty()) {
      if (queue_.empty() && !stopping_ && policy_.idle_yield_us > 0) {
        auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(policy_.idle_yield_us);
        while (queue_.empty() && !stopping_ && std::chrono::steady_clock::now() < until) {
          lock.unlock();
          sched_yield();
          lock.lock();
        }
      }
      cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) break;  // stopping, and every task is complete
    }
    for (auto& task : queue_) waiting_.push_back(std::move(task));
    queue_.clear();
    const PollPolicy policy = policy_;
    lock.unlock();

    bool progressed = start_ready();
    while (test_in_flight()) {  // a completion may let waiting tasks start
      progressed = true;
      if (!start_ready()) break;
    }

    lock.lock();
    in_flight_count_ = waiting_.size() + in_flight_.size();
    if (progressed) sleep_us = policy.min_sleep_us;
    if (in_flight_.empty() || !queue_.empty()) continue;
    if (policy.spin_when_waited && waited()) {
      // A caller is blocked in wait(), so no compute of this rank needs the core: poll
      // again at once, but let any other runnable thread go first.
      lock.unlock();
      sched_yield();
      lock.lock();
      continue;
    }
    poked_ = false;
    cv_.wait_for(lock, std::chrono::duration<double, std::micro>(sleep_us),
                 [&] { return !queue_.empty() || poked_; });
    sleep_us = std::min(sleep_us * policy.growth, static_cast<double>(policy.max_sleep_us));
  }
  exited_ = true;
  drained_cv_.notify_all();
}

bool CommThread::conflicts(const CommTask& task) const {
  for (const auto& other : in_flight_) {
    if (task.writes.overlaps(other->reads) || task.writes.overlaps(other->writes) ||
        task.reads.overlaps(other->writes)) {
      return true;
    }
  }
  return false;
}

bool CommThread::start_ready() {
  bool started = false;
  while (!waiting_.empty() && !conflicts(*waiting_.front())) {
    start_task(std::move(waiting_.front()));
    waiting_.pop_front();
    started = true;
  }
  return started;
}

void CommThread::start_task(std::shared_ptr<CommTask> task) {
  MPI_Request request = MPI_REQUEST_NULL;
  try {
    request = task->start();
  } catch (const std::exception& e) {
    task->error_ = task->describe() + ": " + e.what();
  }
  in_flight_.push_back(std::move(task));
  requests_.push_back(request);
}

bool CommThread::test_in_flight() {
  bool progressed = complete_prefix();
  if (in_flight_.empty()) return progressed;
  const int n = static_cast<int>(requests_.size());
  indices_.resize(n);
  statuses_.resize(n);
  int count = 0;
  int rc;
  {
    auto guard = detail::mpi_guard();
    rc = MPI_Testsome(n, requests_.data(), &count, indices_.data(), statuses_.data());
  }
  if (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS) {
    for (int i = 0; count != MPI_UNDEFINED && i < count; ++i) {
      CommTask& task = *in_flight_[indices_[i]];
      int code = rc == MPI_ERR_IN_STATUS ? statuses_[i].MPI_ERROR : MPI_SUCCESS;
      if (code != MPI_SUCCESS && code != MPI_ERR_PENDING) {
        if (task.error_.empty()) task.error_ = task.describe() + ": " + detail::mpi_error_string(code);
        requests_[indices_[i]] = MPI_REQUEST_NULL;
      }
      task.status_ = statuses_[i];
    }
  } else {
    // A failure not tied to one request: fail every task in flight rather than poll forever.
    for (int i = 0; i < n; ++i) {
      if (requests_[i] == MPI_REQUEST_NULL) continue;
      CommTask& task = *in_flight_[i];
      if (task.error_.empty())
        task.error_ = task.describe() + ": MPI_Testsome: " + detail::mpi_error_string(rc);
      requests_[i] = MPI_REQUEST_NULL;
    }
  }
  return complete_prefix() || progressed;
}

bool CommThread::complete_prefix() {
  size_t k = 0;
  while (k < in_flight_.size() && requests_[k] == MPI_REQUEST_NULL) {
    CommTask& task = *in_flight_[k];
    if (task.error_.empty()) {
      try {
        task.finish(task.status_);
      } catch (const std::exception& e) {
        task.error_ = task.describe() + ": " + e.what();
      }
    }
    task.complete();
    ++k;
  }
  if (k == 0) return false;
  in_flight_.erase(in_flight_.begin(), in_flight_.begin() + static_cast<std::ptrdiff_t>(k));
  requests_.erase(requests_.begin(), requests_.begin() + static_cast<std::ptrdiff_t>(k));
  return true;
}

}  // namespace dpt::dist
