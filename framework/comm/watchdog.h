// The deadline of collectives whose wait() does not block the host. An NCCL collective is
// queued on a stream and its wait() only orders the compute stream after it, so a rank
// whose peer stopped never blocks in dpt: it blocks later, in a device synchronisation that
// knows nothing of collectives. One thread per process watches such work instead (as
// PyTorch's NCCL watchdog does): it polls each until it completes, marks it completed, and
// when one is past its deadline or its backend reports an error, it aborts the backend's
// communicator and reports one message naming the collective, its number and the ranks that
// did not arrive. The MPI backend needs none of this: its wait() polls with the deadline.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/process_group.h"

namespace dpt::dist {

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  using Failure = std::function<void(const std::string& message)>;

  // One collective in flight. `work->is_completed()` must be callable from any thread and
  // never block (it may throw the backend's error). The failure's message is describe() and
  // either timeout_text(timeout) + detail() or ": " and the backend's error.
  struct Watched {
    WorkPtr work;
    std::chrono::milliseconds timeout{0};   // from watch(); 0: none
    std::function<void()> completed;        // called once, on the watchdog's thread
    std::function<std::string()> describe;  // "all_reduce(sum) of 10 f32 on world (collective #3)"
    std::function<std::string()> detail;    // past the deadline: who did not arrive (may be empty)
    std::function<void()> abort;            // frees the backend's stuck resources (ncclCommAbort)
  };

  // on_failure gets the message, after the work's abort(); the process watchdog's ends the
  // job (abort_all). `interval`: time between polls while something is watched.
  explicit Watchdog(Failure on_failure, std::chrono::milliseconds interval = std::chrono::milliseconds(10));
  ~Watchdog();  // stops the thread; what is still watched is dropped unreported
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // ensures: from now on, `w.completed` is called once when w.work completes, or the failure
  // handler once w.timeout after this call (or when is_completed() throws), whichever comes
  // first.
  void watch(Watched w);
  size_t watched();  // for tests and messages
  // Tests: another failure handler in place of the current one, which it returns.
  Failure set_on_failure(Failure on_failure);

 private:
  void run();
  std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable cv_;
  struct Entry {
    Watched w;
    Clock::time_point deadline;
    bool done;  // seen complete by the last poll
  };
  // One pass over `entries`: drops the completed, fails the first one past its deadline.
  void poll(std::vector<Entry>& entries);

  std::vector<Entry> incoming_;  // watch()'s, taken by the thread
  size_t count_ = 0;               // incoming_ plus the thread's own
  Failure on_failure_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

// The process's watchdog, started on first use; a failure ends every rank through
// abort_all() with its message.
Watchdog& process_watchdog();

}  // namespace dpt::dist
