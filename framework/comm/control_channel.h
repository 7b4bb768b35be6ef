// A process group's side channel for faults. Each rank's flight ring (flight_recorder.h)
// numbers the group's collectives as it calls them (#1, #2, ...) and keeps the last few;
// over a duplicate of the group's communicator, the process's communication thread
// (comm_thread.h) answers the other ranks' questions about them. So a rank whose collective
// timed out can name the ranks that never called it, or called something else; and in
// debug mode the ranks compare every collective before it runs (as
// TORCH_DISTRIBUTED_DEBUG=DETAIL does). The normal path costs the ring's record of each
// collective; the communication thread tests one receive per group every kListenInterval.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/flight_recorder.h"

namespace dpt::dist {

class CommThread;

class ControlChannel {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kListenInterval{50};
  // How long diagnose() waits for the other ranks' answers.
  static constexpr std::chrono::milliseconds kAnswerWait{1500};

  // Collective over `comm` (it is duplicated, not kept). requires: MPI initialised; `calls`
  // the group's record of its collectives (its name and world ranks name it in messages),
  // which the answers read. ensures: the communication thread serves it when the group has
  // more than one rank.
  ControlChannel(MPI_Comm comm, std::shared_ptr<const FlightRing> calls);
  ~ControlChannel();  // shutdown()
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  // Leaves the communication thread, ends the pending requests and frees the duplicate
  // communicator. Idempotent; afterwards diagnose() returns "" and nothing else below may
  // be called.
  void shutdown();

  // debug: collectives. Every rank passes its number and signature for the same call.
  // Throws Error on every rank when some rank's call differs from rank 0's, naming the first
  // such rank and both calls; or, on a rank where not every rank has come by `deadline`
  // (Clock::time_point::max(): no limit), Error with diagnose()'s account.
  void check_same(int64_t seq, const CallSignature& signature, Clock::time_point deadline);
  // debug: collectives, after check_same() for a collective whose ranks send each other
  // different amounts (all_to_all): sends[j] is what this rank sends rank j, receives[i]
  // what it expects from rank i (one entry per rank). Throws Error on every rank when some
  // rank i's sends[j] differs from rank j's receives[i], naming the first such pair; or as
  // check_same() when not every rank has come by `deadline`.
  void check_counts(int64_t seq, const CallSignature& signature, const std::vector<int64_t>& sends,
                    const std::vector<int64_t>& receives, Clock::time_point deadline);

  // For collective `seq` that did not complete: asks every other rank (kAnswerWait at most)
  // and returns "; rank 1 did not arrive (its latest collective is #3: barrier)" or
  // "; every rank called it, but rank 1 as all_reduce(sum) of 0 f32", or the like.
  // "" on a group of one rank. Never throws: an MPI failure becomes part of the text.
  std::string diagnose(int64_t seq, const CallSignature& signature);

  // By the communication thread every kListenInterval: answers the questions that came in.
  // Never throws; false when MPI failed (then it serves this channel no more).
  bool serve_queries();

 private:
  // A rank's answer about call `asked`: the rank's latest call, and its call number
  // `asked` if it has made it and still remembers it (else seq 0).
  struct Answer {
    NumberedCall latest, asked;
  };
  struct Query {
    int64_t seq = 0;
    int32_t reply_tag = 0, unused = 0;
  };
  static constexpr int kTagQuery = 0;

  std::string diagnose_locked(int64_t seq, const CallSignature& signature);  // under check_mutex_
  // Under check_mutex_: all-gathers `bytes` bytes from every rank (the same number on each)
  // over the control communicator, rank r's at [r * bytes, (r + 1) * bytes) of the result;
  // the debug check of call `seq`. Throws Error with diagnose()'s account when not every
  // rank has come by `deadline`.
  std::vector<char> exchange_locked(const void* mine, size_t bytes, int64_t seq,
                                    const CallSignature& signature, Clock::time_point deadline);
  std::string rank_name(int rank) const;  // "rank 1" or "rank 1 (world rank 3)"
  std::string call_text(const NumberedCall& call) const;

  MPI_Comm control_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;

  const std::shared_ptr<const FlightRing> calls_;
  std::atomic<bool> shut_down_{false};

  std::mutex check_mutex_;  // one check_same() or diagnose() at a time
  int32_t queries_ = 0;     // under check_mutex_: makes each diagnose()'s reply tag fresh

  // serve_queries()'s (the communication thread's, one call at a time), then shutdown()'s.
  std::shared_ptr<CommThread> thread_;  // serves this channel when the group has 2+ ranks
  Query query_{};
  MPI_Request query_request_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> reply_requests_;
  std::vector<std::unique_ptr<Answer>> replies_;  // parallel; buffers stay put while in flight

};

}  // namespace dpt::dist
