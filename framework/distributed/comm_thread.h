// The communication thread of one process group: collectives are queued in call order,
// started in that order as nonblocking MPI operations, polled with a back-off sleep so the
// thread does not take a core from compute, and completed in call order.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/process_group.h"

namespace dpt::dist {

class CommThread;

// How the communication thread waits. For requests in flight: after an MPI_Test that finds
// nothing finished it sleeps min_sleep_us, then growth times longer each time, up to
// max_sleep_us; any completion resets the sleep. While a caller is blocked in wait() nobody
// computes on its behalf, so (spin_when_waited) the thread polls without sleeping, yielding
// the core between polls. With nothing in flight it blocks on a condition variable, after
// yielding for idle_yield_us in case the next collective follows at once (this saves a
// thread wake-up, ~4 us of the ~12 us hand-off measured by tools/bench/bench_allreduce).
struct PollPolicy {
  int min_sleep_us = 2;
  int max_sleep_us = 128;
  double growth = 1.25;
  bool spin_when_waited = true;
  int idle_yield_us = 20;
};

// Bytes [begin, end) a task reads or writes while in flight.
struct ByteSpan {
  const char* begin = nullptr;
  const char* end = nullptr;
  bool overlaps(const ByteSpan& o) const { return begin < o.end && o.begin < end; }
};

// One collective: the Work handed to the caller and the task the thread runs.
class CommTask : public Work {
 public:
  // What the task reads (and does not write) and what it writes (and may read), set before
  // post(). A task does not start while an earlier one in flight writes what it touches or
  // touches what it writes, so all_reduce(t) then broadcast(t) without a wait is fine.
  ByteSpan reads, writes;

  // Blocks (condition variable) until this task and every earlier one of its group are
  // complete; rethrows the task's error as dpt::Error. With a timeout set, throws Error
  // naming the collective when it is not complete in time.
  void wait() override;
  bool is_completed() override { return done_.load(std::memory_order_acquire); }
  // For messages: "all_reduce(sum) of 1000 f32 on world".
  virtual std::string describe() const = 0;

 protected:
  // On the communication thread, in call order: starts the operation; returns its request,
  // or MPI_REQUEST_NULL when nothing is left to do (0 elements). Throws Error on failure.
  virtual MPI_Request start() = 0;
  // On the communication thread after the request completed (e.g. divides by the group
  // size for avg, checks a received count). Throws Error on failure.
  virtual void finish(const MPI_Status& status) = 0;

 private:
  friend class CommThread;
  void complete();  // on the communication thread, after error_ is set (or left empty)

  CommThread* thread_ = nullptr;  // valid while the task is not complete
  std::chrono::milliseconds timeout_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  std::atomic<int> waiters_{0};
  std::string error_;    // set on the communication thread before done_
  MPI_Status status_{};  // of the completed request
};

// Tasks start in post() order, each as soon as no earlier task in flight conflicts with its
// buffers (so independent ones overlap, and a send and a recv in a ring cannot deadlock);
// they complete in post() order.
class CommThread {
 public:
  explicit CommThread(PollPolicy policy = {});
  ~CommThread();  // stop(0): drains the queue, however long that takes
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `task` behind every earlier one. requires: stop() not called (else Error).
  // ensures: the task starts after, and completes no earlier than, every earlier task.
  void post(const std::shared_ptr<CommTask>& task, std::chrono::milliseconds timeout);
  // Lets every queued task complete, then joins the thread. With timeout > 0, returns
  // false (thread left running) when the tasks are not complete by then. Idempotent.
  bool stop(std::chrono::milliseconds timeout);
  void set_poll_policy(const PollPolicy& policy);
  // How many tasks are queued or in flight (for messages).
  size_t pending();

 private:
  friend class CommTask;
  void poke();  // a caller began to wait
  void run();
  bool start_ready();  // starts waiting tasks while they do not conflict; returns whether any
  bool conflicts(const CommTask& task) const;
  void start_task(std::shared_ptr<CommTask> task);
  bool test_in_flight();   // returns whether a task completed
  bool complete_prefix();  // completes the finished tasks at the front; returns whether any

  std::mutex mutex_;
  std::condition_variable cv_, drained_cv_;
  std::deque<std::shared_ptr<CommTask>> queue_;
  size_t in_flight_count_ = 0;  // waiting_ + in_flight_, under mutex_
  bool stopping_ = false, stopped_ = false, exited_ = false, poked_ = false;
  bool waited();  // whether a caller is blocked on a task in flight
  PollPolicy policy_;

  // Communication thread only.
  std::deque<std::shared_ptr<CommTask>> waiting_;  // taken from queue_, not yet started
  std::deque<std::shared_ptr<CommTask>> in_flight_;
  std::vector<MPI_Request> requests_;  // parallel to in_flight_
  std::vector<int> indices_;           // MPI_Testsome's output
  std::vector<MPI_Status> statuses_;   // MPI_Testsome's output

  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace dpt::dist
