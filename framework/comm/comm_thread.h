// The collectives of one process group: queued in call order, started in that order as
// nonblocking MPI operations, progressed (MPI_Testsome) and completed in call order.
//
// Who makes the MPI calls. MPI forbids two threads touching one request at once, so the
// group's in-flight state belongs to whoever holds the group's poll token, a mutex:
//  - the caller, in post(), when the token is free: it starts its collective itself (a
//    small all_reduce costs what MPI_Iallreduce costs); else its holder starts it;
//  - the caller, in wait(): one waiter at a time polls the group's requests itself until
//    its task is complete (like MPI_Wait); another sleeps on a condition variable;
//  - the communication thread, otherwise: it polls what callers left in flight (DDP's
//    bucket all-reduces during backward) with a back-off sleep, so it does not take a core
//    from compute. While a waiter polls, or nothing is in flight, it blocks: no timed
//    wake-ups that would preempt a polling rank (on a 2-core VM they cost ~20% of a
//    64 KB - 4 MB all_reduce). A caller that leaves a collective in flight wakes it.
// The token's holder starts and completes tasks in call order, whichever thread it is.
// Under MPI_THREAD_SERIALIZED each MPI call also takes the process-wide mutex (mpi_check.h),
// and a polling waiter yields between fruitless polls so other groups' threads get it.
// Locks, outermost first: the token, a task's mutex_, the CommThread's mutex_.
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

#include "comm/process_group.h"

namespace dpt::dist {

class CommThread;

// How the communication thread waits for requests in flight: after an MPI_Testsome that
// finds nothing finished it sleeps min_sleep_us, then growth times longer each time, up to
// max_sleep_us; any completion resets the sleep. While a caller is blocked in wait() without
// polling (another thread of its rank is the polling waiter) it computes nothing, so the
// thread then polls without sleeping, yielding the core between polls.
struct PollPolicy {
  int min_sleep_us = 2;
  int max_sleep_us = 128;
  double growth = 1.25;
};

// Bytes [begin, end) a task reads or writes while in flight.
struct ByteSpan {
  const char* begin = nullptr;
  const char* end = nullptr;
  bool overlaps(const ByteSpan& o) const { return begin < o.end && o.begin < end; }
};

// One collective: the Work handed to the caller and the task the token holder runs.
class CommTask : public Work {
 public:
  // What the task reads (and does not write) and what it writes (and may read), set before
  // post(). A task does not start while an earlier one in flight writes what it touches or
  // touches what it writes, so all_reduce(t) then broadcast(t) without a wait is fine.
  // scratch: memory outside the tensors that the task uses alone while in flight (the
  // segment of a small all-reduce, shm_buffer.h): tasks with overlapping scratch run one at a time.
  ByteSpan reads, writes, scratch;

  // Returns once this task and every earlier one of its group are complete; rethrows the
  // task's error. With a timeout set, throws Error naming the collective when it is not
  // complete in time; it stays in flight, and a later wait() may still succeed.
  void wait() override;
  // Does not progress the task; when it is not complete, wakes the group's thread to do it.
  bool is_completed() override;
  // Progresses its group once on the calling thread when the poll token is free, then
  // is_completed(): the hierarchical all-reduce's stages, with no hand-off to a sleeping
  // thread between one stage's completion and the next one's start.
  bool test() override;
  std::string describe() const override = 0;
  // Appended to the timeout message: who did not arrive ("; did not arrive: rank 1 ...").
  // Called on the waiting thread, after it stopped polling; must not throw.
  virtual std::string timeout_detail() const { return ""; }

 protected:
  // By the poll token's holder, in call order: starts the operation; returns its request, or
  // MPI_REQUEST_NULL when there is none (0 elements, or a task that progress() completes).
  // Throws Error on failure.
  virtual MPI_Request start() = 0;
  // By the poll token's holder, after start() returned MPI_REQUEST_NULL and until it returns
  // true: advances a task that completes without MPI (shm_buffer.h); true: complete.
  // Must not block. Throws Error on failure.
  virtual bool progress() { return true; }
  // By the poll token's holder after the request completed (e.g. divides by the group size
  // for avg, checks a received count). Throws Error on failure.
  virtual void finish(const MPI_Status& status) = 0;

 private:
  friend class CommThread;
  bool finished() const { return done_.load(std::memory_order_acquire); }
  void fail(const std::string& why);  // by the token's holder: error_, unless set already
  void complete();                    // by the token's holder, after error_ is set (or left empty)
  // Blocks on cv_ while the thread (or the polling waiter) progresses the task; false: timed out.
  bool sleep_until_done(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline);

  CommThread* thread_ = nullptr;  // valid while the task is not complete
  std::chrono::milliseconds timeout_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  std::atomic<int> waiters_{0};  // callers blocked on cv_
  std::string error_;            // set by the token's holder before done_
  MPI_Status status_{};          // of the completed request
};

// Tasks start in post() order, each as soon as no earlier task in flight conflicts with its
// buffers (so independent ones overlap, and a send and a recv in a ring cannot deadlock);
// they complete in post() order.
class CommThread {
 public:
  CommThread();
  ~CommThread();  // stop(0): drains the queue, however long that takes
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `task` behind every earlier one, or starts it at once on the calling thread when
  // the poll token is free. requires: stop() not called (else Error).
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
  using Clock = std::chrono::steady_clock;
  struct Round {
    bool ran = false;         // the token was free
    bool progressed = false;  // a task started or completed
    bool waited = false;      // a caller sleeps in wait() on a task not complete
  };

  // Callers.
  bool post_started(const std::shared_ptr<CommTask>& task);  // false: the token is busy
  void post_queued(const std::shared_ptr<CommTask>& task);
  void check_running(const CommTask& task) const;  // under mutex_: Error once stop() began
  void poke();                         // a caller began to sleep in wait()
  bool enter_polling();                // from wait(), under the task's mutex; true: this caller polls
  bool poll_until_done(CommTask& task, Clock::time_point deadline);  // false: timed out
  void leave_polling();

  // The communication thread.
  void run();
  bool has_work() const;  // under mutex_
  void back_off(std::unique_lock<std::mutex>& lock, double sleep_us);
  Round try_round();

  // The token's holder.
  // Takes the queue, starts what may start, tests what is in flight; whether any progressed.
  bool round();
  void take_queue_locked();  // moves queue_ to waiting_, under mutex_
  bool start_ready();    // starts waiting tasks while they do not conflict; returns whether any
  bool conflicts(const CommTask& task) const;
  void start_task(std::shared_ptr<CommTask> task);
  bool test_in_flight();   // returns whether a task completed
  bool progress_local();   // progress() of the tasks without a request; whether any completed
  bool mpi_in_flight() const;  // whether some task in flight has an MPI request
  bool complete_prefix();  // completes the finished tasks at the front; returns whether any
  bool waited() const;     // whether a caller sleeps on a task not complete

  std::mutex mutex_;  // the fields below up to policy_, and the thread's sleeps
  std::condition_variable cv_, drained_cv_;
  std::deque<std::shared_ptr<CommTask>> queue_;
  // Taken from queue_ (or started by post) and not complete; raised under mutex_.
  std::atomic<size_t> in_flight_count_{0};
  bool stopping_ = false, stopped_ = false, exited_ = false, poked_ = false;
  bool polling_waiter_ = false;  // a caller polls in wait(): the thread leaves the token alone
  bool blocked_ = false;         // the thread sleeps until notified (not a back-off sleep)
  PollPolicy policy_;
  std::atomic<bool> queued_{false};  // queue_ is not empty: lets the token's holder skip mutex_

  // The poll token: whoever holds it owns the fields below and makes the group's MPI calls.
  std::mutex token_;
  std::deque<std::shared_ptr<CommTask>> waiting_;  // taken from queue_, not yet started
  std::deque<std::shared_ptr<CommTask>> in_flight_;
  std::vector<MPI_Request> requests_;  // parallel to in_flight_
  std::vector<char> local_;            // parallel to in_flight_: progress() not yet true
  std::vector<int> indices_;           // MPI_Testsome's output
  std::vector<MPI_Status> statuses_;   // MPI_Testsome's output

  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace dpt::dist
