// The poll token, the queue, the process's communication thread's loop and the waiting of
// comm_thread.h. The thread sleeps between polls (PollPolicy) because a spinning progress
// loop would steal the core that compute runs on; a waiter polls without sleeping, as
// MPI_Wait does, because nothing of its rank computes while it waits.
#include "comm/comm_thread.h"

#include <sched.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "comm/control_channel.h"
#include "comm/mpi_check.h"

namespace dpt::dist {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

void CommTask::wait() {
  if (!finished()) {
    const Clock::time_point deadline =
        timeout_.count() > 0 ? Clock::now() + timeout_ : Clock::time_point::max();
    std::unique_lock<std::mutex> lock(mutex_);
    if (!finished()) {
      // queue_ is valid here: the task is not complete, and completing needs mutex_. Once
      // enter_polling() succeeds the queue's stop() does not return before leave_polling().
      CommQueue* queue = queue_;
      bool finished;
      if (queue->enter_polling()) {
        lock.unlock();
        struct Leave {
          CommQueue* queue;
          ~Leave() { queue->leave_polling(); }  // on the error path too
        } leave{queue};
        finished = queue->poll_until_done(*this, deadline);
      } else {
        finished = sleep_until_done(lock, deadline);
        lock.unlock();
      }
      // With the poll token and this task's mutex released: the communication thread
      // progresses the group meanwhile, and the detail may take a while to gather.
      if (!finished) throw Error(describe() + timeout_text(timeout_) + timeout_detail());
    }
  }
  if (!error_.empty()) throw Error(error_);
}

bool CommTask::sleep_until_done(std::unique_lock<std::mutex>& lock, Clock::time_point deadline) {
  auto done = [&] { return finished(); };
  waiters_.fetch_add(1, std::memory_order_relaxed);
  queue_->thread_->poke();
  bool finished = true;
  if (deadline == Clock::time_point::max()) {
    cv_.wait(lock, done);
  } else {
    finished = cv_.wait_until(lock, deadline, done);
  }
  waiters_.fetch_sub(1, std::memory_order_relaxed);
  return finished;
}

bool CommTask::is_completed() {
  if (finished()) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  if (done_.load(std::memory_order_relaxed)) return true;
  queue_->thread_->poke();  // valid: not complete, and completing needs mutex_
  return false;
}

bool CommTask::test() {
  if (finished()) return true;
  CommQueue* queue = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_.load(std::memory_order_relaxed)) return true;
    queue = queue_;
  }
  queue->try_round();  // the group, which owns its queue, outlives its pending tasks
  return is_completed();
}

void CommTask::fail(const std::string& why) {
  if (error_.empty()) error_ = describe() + ": " + why;
}

void CommTask::complete() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_ = nullptr;
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

CommQueue::CommQueue() : thread_(CommThread::acquire()) { thread_->add(this); }

CommQueue::~CommQueue() {
  try {
    stop(std::chrono::milliseconds(0));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpt: stopping a group's communication: %s\n", e.what());
  }
  thread_->remove(this);
}

void CommQueue::post(const std::shared_ptr<CommTask>& task, std::chrono::milliseconds timeout) {
  task->queue_ = this;
  task->timeout_ = timeout;
  if (!post_started(task)) post_queued(task);
}

bool CommQueue::post_started(const std::shared_ptr<CommTask>& task) {
  std::unique_lock<std::mutex> token(token_, std::try_to_lock);
  if (!token.owns_lock()) return false;
  bool was_blocked;
  {
    std::lock_guard<std::mutex> lock(thread_->mutex_);
    check_running(*task);
    take_queue_locked();  // earlier collectives first: the order of starts is the order of calls
    waiting_.push_back(task);
    ++in_flight_count_;
    // Blocked now, the thread stays blocked until notified; not blocked, it sees the count
    // above before it next blocks (both under the mutex), so no wake-up can be lost.
    was_blocked = thread_->blocked_;
  }
  // Earlier tasks without a request may be done by now and let this one start (no MPI
  // call here: testing MPI requests is the waiters' and the thread's job).
  progress_local();
  complete_prefix();
  start_ready();
  complete_prefix();  // a 0-element collective with nothing before it is complete already
  // What is left needs a thread that is awake (one in a back-off sleep is): MPI requests,
  // and tasks that cannot start yet. A task without a request left alone is progressed by
  // the next wait(), post() or is_completed() of the group, or by stop().
  if (was_blocked && (!waiting_.empty() || mpi_in_flight())) thread_->cv_.notify_one();
  return true;
}

void CommQueue::post_queued(const std::shared_ptr<CommTask>& task) {
  {
    std::lock_guard<std::mutex> lock(thread_->mutex_);
    check_running(*task);
    queue_.push_back(task);
    queued_.store(true, std::memory_order_relaxed);
    if (polling_waiter_) return;  // it takes the queue in its next round, or wakes the thread on leaving
    thread_->poked_ = true;
  }
  thread_->cv_.notify_one();
}

void CommQueue::check_running(const CommTask& task) const {
  DPT_CHECK(!stopping_) << task.describe() << ": the group's communication has stopped "
                        << "(dist::finalize() or the group was destroyed)";
}

bool CommQueue::stop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(thread_->mutex_);
  if (!stopping_) {
    stopping_ = true;
    thread_->cv_.notify_one();
  }
  auto is_drained = [&] { return drained(); };
  if (timeout.count() > 0) return thread_->drained_cv_.wait_for(lock, timeout, is_drained);
  thread_->drained_cv_.wait(lock, is_drained);
  return true;
}

void CommQueue::set_poll_policy(const PollPolicy& policy) {
  DPT_CHECK(policy.min_sleep_us >= 0 && policy.max_sleep_us >= policy.min_sleep_us && policy.growth >= 1.0)
      << "PollPolicy needs 0 <= min_sleep_us <= max_sleep_us and growth >= 1, got " << policy.min_sleep_us
      << ", " << policy.max_sleep_us << ", " << policy.growth;
  std::lock_guard<std::mutex> lock(thread_->mutex_);
  thread_->policy_ = policy;
}

size_t CommQueue::pending() {
  std::lock_guard<std::mutex> lock(thread_->mutex_);
  return queue_.size() + in_flight_count_;
}

bool CommQueue::enter_polling() {
  std::lock_guard<std::mutex> lock(thread_->mutex_);
  if (polling_waiter_) return false;
  polling_waiter_ = true;
  return true;
}

bool CommQueue::poll_until_done(CommTask& task, Clock::time_point deadline) {
  // Blocks for at most one round of the thread's: it takes the token no more once it sees
  // polling_waiter_, and a caller in post() holds it only to start a collective.
  std::lock_guard<std::mutex> token(token_);
  const bool timed = deadline != Clock::time_point::max();
  while (!task.finished()) {
    const bool progressed = round();
    if (timed && !task.finished() && Clock::now() >= deadline) return false;
    // Under MPI_THREAD_SERIALIZED each poll takes the process-wide MPI mutex, which is not
    // fair: let the other threads have it between polls.
    if (detail::mpi_serialized && !progressed) sched_yield();
  }
  return true;
}

void CommQueue::leave_polling() {
  std::lock_guard<std::mutex> lock(thread_->mutex_);
  polling_waiter_ = false;
  // What is left needs the thread now; a stop() waits for the queue to drain. Notified under
  // the lock: once it is released stop() may return and this queue be destroyed.
  if (!queue_.empty() || in_flight_count_ > 0) thread_->cv_.notify_one();
  if (stopping_) thread_->drained_cv_.notify_all();
}

bool CommQueue::has_work() const {
  // While a waiter polls, what is in flight is its to progress.
  return !polling_waiter_ && (!queue_.empty() || in_flight_count_ > 0);
}

bool CommQueue::drained() const { return !polling_waiter_ && queue_.empty() && in_flight_count_ == 0; }

CommQueue::Round CommQueue::try_round() {
  std::unique_lock<std::mutex> token(token_, std::try_to_lock);
  if (!token.owns_lock()) return {};
  const bool progressed = round();
  return {true, progressed, waited()};
}

std::shared_ptr<CommThread> CommThread::acquire() {
  static std::mutex mutex;
  static std::weak_ptr<CommThread> running;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<CommThread> thread = running.lock();
  if (!thread) {
    thread.reset(new CommThread());
    running = thread;
  }
  return thread;
}

CommThread::CommThread() : thread_([this] { run(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void CommThread::add(CommQueue* queue) {
  std::lock_guard<std::mutex> lock(mutex_);
  queues_.push_back(queue);
}

void CommThread::remove(CommQueue* queue) {
  std::unique_lock<std::mutex> lock(mutex_);
  queues_.erase(std::find(queues_.begin(), queues_.end(), queue));
  swept_cv_.wait(lock, [&] { return !sweeping_; });
}

void CommThread::listen(ControlChannel* channel) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    channels_.push_back(channel);
  }
  cv_.notify_one();
}

void CommThread::unlisten(ControlChannel* channel) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::erase(channels_, channel);
  swept_cv_.wait(lock, [&] { return !sweeping_; });
}

void CommThread::poke() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    poked_ = true;
  }
  cv_.notify_one();
}

bool CommThread::has_work() const {
  return std::any_of(queues_.begin(), queues_.end(), [](const CommQueue* q) { return q->has_work(); });
}

bool CommThread::queued() const {
  return std::any_of(queues_.begin(), queues_.end(), [](const CommQueue* q) { return !q->queue_.empty(); });
}

void CommThread::run() {
  // The default 50 us timer slack would round every short back-off sleep up to ~50 us.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  prctl(PR_SET_NAME, "dpt-comm", 0UL, 0UL, 0UL);  // as top -H and /proc name it
  std::unique_lock<std::mutex> lock(mutex_);
  double sleep_us = policy_.min_sleep_us;
  std::vector<CommQueue*> busy;
  Clock::time_point next_listen{};
  for (;;) {
    drained_cv_.notify_all();  // for stop(); without a waiter, it costs no system call
    if (!channels_.empty() && Clock::now() >= next_listen) {
      // Outside the mutex: a test of a request progresses every MPI transfer in flight,
      // which callers posting and waiting must not queue behind. unlisten() waits for it.
      std::vector<ControlChannel*> serving = channels_, failed;
      sweeping_ = true;
      lock.unlock();
      for (ControlChannel* c : serving)
        if (!c->serve_queries()) failed.push_back(c);
      lock.lock();
      sweeping_ = false;
      swept_cv_.notify_all();
      std::erase_if(channels_, [&](ControlChannel* c) { return std::ranges::count(failed, c) > 0; });
      next_listen = Clock::now() + ControlChannel::kListenInterval;
    }
    const PollPolicy policy = policy_;
    if (!has_work()) {
      if (quit_) break;
      blocked_ = true;
      auto woken = [&] { return has_work() || quit_; };
      if (channels_.empty()) {
        // listen() starts the timed wake-ups.
        cv_.wait(lock, [&] { return woken() || !channels_.empty(); });
      } else {
        cv_.wait_until(lock, next_listen, woken);
      }
      blocked_ = false;
      sleep_us = policy.min_sleep_us;
      continue;
    }
    busy.clear();
    for (CommQueue* queue : queues_) {
      if (queue->has_work()) busy.push_back(queue);
    }
    sweeping_ = true;  // remove() waits for the end of the sweep: the queues stay valid
    lock.unlock();
    CommQueue::Round all{true, false, false};
    for (CommQueue* queue : busy) {
      const CommQueue::Round r = queue->try_round();
      all.ran = all.ran && r.ran;
      all.progressed = all.progressed || r.progressed;
      all.waited = all.waited || r.waited;
    }
    lock.lock();
    sweeping_ = false;
    swept_cv_.notify_all();
    if (!all.ran || all.waited) {
      // A token was busy (a caller starting a collective, or one that just began to poll),
      // or a caller blocked in wait() computes nothing: poll again at once, but let any
      // other runnable thread go first.
      lock.unlock();
      sched_yield();
      lock.lock();
      continue;
    }
    if (all.progressed) sleep_us = policy.min_sleep_us;
    if (!has_work() || queued()) continue;
    poked_ = false;
    cv_.wait_for(lock, std::chrono::duration<double, std::micro>(sleep_us), [&] { return poked_; });
    sleep_us = std::min(sleep_us * policy.growth, static_cast<double>(policy.max_sleep_us));
  }
}

bool CommQueue::round() {
  if (queued_.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(thread_->mutex_);
    take_queue_locked();
  }
  bool progressed = start_ready();
  while (test_in_flight()) {  // a completion may let waiting tasks start
    progressed = true;
    if (!start_ready()) break;
  }
  return progressed;
}

void CommQueue::take_queue_locked() {
  for (auto& task : queue_) waiting_.push_back(std::move(task));
  in_flight_count_ += queue_.size();
  queue_.clear();
  queued_.store(false, std::memory_order_relaxed);
}

bool CommQueue::waited() const {
  auto is_waited = [](const auto& task) { return task->waiters_.load(std::memory_order_relaxed) > 0; };
  return std::any_of(in_flight_.begin(), in_flight_.end(), is_waited) ||
         std::any_of(waiting_.begin(), waiting_.end(), is_waited);
}

bool CommQueue::conflicts(const CommTask& task) const {
  for (const auto& other : in_flight_) {
    if (task.writes.overlaps(other->reads) || task.writes.overlaps(other->writes) ||
        task.reads.overlaps(other->writes) || task.scratch.overlaps(other->scratch)) {
      return true;
    }
  }
  return false;
}

bool CommQueue::start_ready() {
  bool started = false;
  while (!waiting_.empty() && !conflicts(*waiting_.front())) {
    start_task(std::move(waiting_.front()));
    waiting_.pop_front();
    started = true;
  }
  return started;
}

void CommQueue::start_task(std::shared_ptr<CommTask> task) {
  MPI_Request request = MPI_REQUEST_NULL;
  bool local = false;
  try {
    request = task->start();
    local = request == MPI_REQUEST_NULL && !task->progress();
  } catch (const std::exception& e) {
    task->fail(e.what());
  }
  in_flight_.push_back(std::move(task));
  requests_.push_back(request);
  local_.push_back(local);
}

bool CommQueue::mpi_in_flight() const {
  return std::any_of(requests_.begin(), requests_.end(), [](MPI_Request r) { return r != MPI_REQUEST_NULL; });
}

bool CommQueue::progress_local() {
  bool completed = false;
  for (size_t i = 0; i < in_flight_.size(); ++i) {
    if (!local_[i]) continue;
    CommTask& task = *in_flight_[i];
    try {
      local_[i] = !task.progress();
    } catch (const std::exception& e) {
      task.fail(e.what());
      local_[i] = false;
    }
    completed = completed || !local_[i];
  }
  return completed;
}

bool CommQueue::test_in_flight() {
  bool progressed = progress_local();
  progressed = complete_prefix() || progressed;
  if (!mpi_in_flight()) return progressed;
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
        task.fail(detail::mpi_error_string(code));
        requests_[indices_[i]] = MPI_REQUEST_NULL;
      }
      task.status_ = statuses_[i];
    }
  } else {
    // A failure not tied to one request: fail every task in flight rather than poll forever.
    for (int i = 0; i < n; ++i) {
      if (requests_[i] == MPI_REQUEST_NULL) continue;
      in_flight_[i]->fail("MPI_Testsome: " + detail::mpi_error_string(rc));
      requests_[i] = MPI_REQUEST_NULL;
    }
  }
  return complete_prefix() || progressed;
}

bool CommQueue::complete_prefix() {
  size_t k = 0;
  while (k < in_flight_.size() && requests_[k] == MPI_REQUEST_NULL && !local_[k]) {
    CommTask& task = *in_flight_[k];
    if (task.error_.empty()) {
      try {
        task.finish(task.status_);
      } catch (const std::exception& e) {
        task.fail(e.what());
      }
    }
    task.complete();
    ++k;
  }
  if (k == 0) return false;
  in_flight_.erase(in_flight_.begin(), in_flight_.begin() + static_cast<std::ptrdiff_t>(k));
  requests_.erase(requests_.begin(), requests_.begin() + static_cast<std::ptrdiff_t>(k));
  local_.erase(local_.begin(), local_.begin() + static_cast<std::ptrdiff_t>(k));
  // No lock: nobody waits for the count to fall (has_work() reading it one round late
  // only costs that round), and this saves a lock per collective (~5% of a small one).
  in_flight_count_.fetch_sub(k, std::memory_order_relaxed);
  return true;
}

}  // namespace dpt::dist
