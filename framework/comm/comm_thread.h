// The collectives of one process group: queued in call order, started in that order as
// nonblocking MPI operations, progressed (MPI_Testsome) and completed in call order.
//
// Who makes the MPI calls. MPI forbids two threads touching one request at once, so a
// group's in-flight state belongs to whoever holds the group's poll token, a mutex:
//  - the caller, in post(), when the token is free: it starts its collective itself (a
//    small all_reduce costs what MPI_Iallreduce costs); else its holder starts it;
//  - the caller, in wait(): one waiter at a time polls the group's requests itself until
//    its task is complete (like MPI_Wait); another sleeps on a condition variable;
//  - the process's one communication thread, otherwise: it polls what callers of every group
//    left in flight (DDP's bucket all-reduces during backward) with a back-off sleep, so it
//    does not take a core from compute. While nothing is in flight that a waiter does not
//    poll, it blocks: no timed wake-ups that would preempt a polling rank (on a 2-core VM
//    they cost ~20% of a 64 KB - 4 MB all_reduce) but the one every kListenInterval that
//    answers the control channels' questions (control_channel.h). A caller that leaves a
//    collective in flight wakes it.
// The token's holder starts and completes tasks in call order, whichever thread it is.
// Under MPI_THREAD_SERIALIZED each MPI call also takes the process-wide mutex (mpi_check.h),
// and a polling waiter yields between fruitless polls so other threads get it.
// Locks, outermost first: a group's token, a task's mutex_, the CommThread's mutex_.
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

class CommQueue;
class CommThread;
class ControlChannel;

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
  friend class CommQueue;
  bool finished() const { return done_.load(std::memory_order_acquire); }
  void fail(const std::string& why);  // by the token's holder: error_, unless set already
  void complete();                    // by the token's holder, after error_ is set (or left empty)
  // Blocks on cv_ while the thread (or the polling waiter) progresses the task; false: timed out.
  bool sleep_until_done(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline);

  CommQueue* queue_ = nullptr;  // valid while the task is not complete
  std::chrono::milliseconds timeout_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  std::atomic<int> waiters_{0};  // callers blocked on cv_
  std::string error_;            // set by the token's holder before done_
  MPI_Status status_{};          // of the completed request
};

// One group's tasks. They start in post() order, each as soon as no earlier task in flight
// conflicts with its buffers (so independent ones overlap, and a send and a recv in a ring
// cannot deadlock); they complete in post() order.
class CommQueue {
 public:
  CommQueue();   // joins the process's communication thread (starts it when it is the first)
  ~CommQueue();  // stop(0): drains the queue, however long that takes; then leaves the thread
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  // Queues `task` behind every earlier one, or starts it at once on the calling thread when
  // the poll token is free. requires: stop() not called (else Error).
  // ensures: the task starts after, and completes no earlier than, every earlier task.
  void post(const std::shared_ptr<CommTask>& task, std::chrono::milliseconds timeout);
  // Refuses new tasks and returns once every queued one is complete. With timeout > 0,
  // returns false when they are not complete by then (the thread goes on with them).
  bool stop(std::chrono::milliseconds timeout);
  // For every group of the process: it has one communication thread.
  void set_poll_policy(const PollPolicy& policy);
  // How many tasks are queued or in flight (for messages).
  size_t pending();

 private:
  friend class CommTask;
  friend class CommThread;
  using Clock = std::chrono::steady_clock;
  struct Round {
    bool ran = false;         // the token was free
    bool progressed = false;  // a task started or completed
    bool waited = false;      // a caller sleeps in wait() on a task not complete
  };

  // Callers.
  bool post_started(const std::shared_ptr<CommTask>& task);  // false: the token is busy
  void post_queued(const std::shared_ptr<CommTask>& task);
  void check_running(const CommTask& task) const;  // under the thread's mutex_: Error once stop() began
  bool enter_polling();                // from wait(), under the task's mutex; true: this caller polls
  bool poll_until_done(CommTask& task, Clock::time_point deadline);  // false: timed out
  void leave_polling();
  bool has_work() const;  // under the thread's mutex_: something for the thread to poll
  bool drained() const;   // under the thread's mutex_: nothing queued, in flight or polled

  // The token's holder.
  Round try_round();  // round() when the token is free
  // Takes the queue, starts what may start, tests what is in flight; whether any progressed.
  bool round();
  void take_queue_locked();  // moves queue_ to waiting_, under the thread's mutex_
  bool start_ready();    // starts waiting tasks while they do not conflict; returns whether any
  bool conflicts(const CommTask& task) const;
  void start_task(std::shared_ptr<CommTask> task);
  bool test_in_flight();   // returns whether a task completed
  bool progress_local();   // progress() of the tasks without a request; whether any completed
  bool mpi_in_flight() const;  // whether some task in flight has an MPI request
  bool complete_prefix();  // completes the finished tasks at the front; returns whether any
  bool waited() const;     // whether a caller sleeps on a task not complete

  // First: the thread outlives what it polls. Its mutex_ guards the fields below up to queued_.
  const std::shared_ptr<CommThread> thread_;
  std::deque<std::shared_ptr<CommTask>> queue_;
  // Taken from queue_ (or started by post) and not complete; raised under the mutex.
  std::atomic<size_t> in_flight_count_{0};
  bool stopping_ = false;
  bool polling_waiter_ = false;  // a caller polls in wait(): the thread leaves the token alone
  std::atomic<bool> queued_{false};  // queue_ is not empty: lets the token's holder skip the mutex

  // The poll token: whoever holds it owns the fields below and makes the group's MPI calls.
  std::mutex token_;
  std::deque<std::shared_ptr<CommTask>> waiting_;  // taken from queue_, not yet started
  std::deque<std::shared_ptr<CommTask>> in_flight_;
  std::vector<MPI_Request> requests_;  // parallel to in_flight_
  std::vector<char> local_;            // parallel to in_flight_: progress() not yet true
  std::vector<int> indices_;           // MPI_Testsome's output
  std::vector<MPI_Status> statuses_;   // MPI_Testsome's output
};

// The process's communication thread: one for all its groups, so a hybrid job with host,
// tensor- and data-parallel groups runs one such thread, not one a group. It sweeps the
// groups that have work, each with try_round(); while none has, it blocks. Every
// ControlChannel::kListenInterval, busy or not, it answers the control channels' questions.
class CommThread {
 public:
  // The running one, or a new one when no group holds one; joined when the last lets go.
  static std::shared_ptr<CommThread> acquire();
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Serves `channel` (ControlChannel::serve_queries) until unlisten(), or until serving it
  // fails; unlisten() returns once no serving touches it.
  void listen(ControlChannel* channel);
  void unlisten(ControlChannel* channel);
  void poke();  // skips the back-off sleep: a task was queued, or a caller sleeps in wait()

 private:
  friend class CommQueue;
  CommThread();
  void run();
  bool has_work() const;  // under mutex_: some group has work
  bool queued() const;    // under mutex_: some group has a task not yet taken
  void add(CommQueue* queue);
  void remove(CommQueue* queue);  // returns once no sweep touches `queue`

  std::mutex mutex_;  // the fields below, and each queue's up to its queued_
  std::condition_variable cv_, drained_cv_, swept_cv_;
  std::vector<CommQueue*> queues_;
  std::vector<ControlChannel*> channels_;
  bool quit_ = false;
  bool poked_ = false;    // a task was queued, or a caller sleeps in wait(): skip the back-off
  bool blocked_ = false;  // the thread sleeps until notified (not a back-off sleep)
  bool sweeping_ = false; // the thread is in try_round() of the queues it took, or serving channels_
  PollPolicy policy_;

  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace dpt::dist
