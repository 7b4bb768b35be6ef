// A process group's side channel for faults. Each rank numbers the group's collectives as
// it calls them (#1, #2, ...) and keeps the last few; over a duplicate of the group's
// communicator, the process's one listener thread answers the other ranks' questions about
// them. So a rank whose collective timed out can name the ranks that never called it, or
// called something else; and in debug mode the ranks compare every collective before it
// runs (as TORCH_DISTRIBUTED_DEBUG=DETAIL does).
// The normal path costs one counter and a 24-byte copy under an uncontended mutex per
// collective; the listener wakes every kListenInterval to test one receive per group.
#pragma once

#include <mpi.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dpt::dist {

// What tells one collective call from another across ranks: the operation (OpKind, mpi_op.h),
// reduce op, dtype, root and element count.
struct CallSignature {
  int32_t op = 0, reduce = 0, dtype = 0, root = 0;
  int64_t count = 0;
  bool operator==(const CallSignature&) const = default;
};
// "all_reduce(sum) of 1000 f32", "broadcast of 10 f32 from rank 0", "gather of 3 f32 per
// rank to rank 1", "all_to_all of f32", "barrier": a collective's signature as text, for
// messages on every rank alike. all_to_all's counts differ between ranks: its signature has
// none (debug: collectives checks its splits apart). Defined in mpi_op.cpp.
std::string signature_text(const CallSignature& sig);

class ControlChannel {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kListenInterval{50};
  // How long diagnose() waits for the other ranks' answers.
  static constexpr std::chrono::milliseconds kAnswerWait{1500};

  // Collective over `comm` (it is duplicated, not kept). requires: MPI initialised;
  // world_ranks[r] the world rank of comm's rank r; group_name for messages ("world").
  // ensures: the process's listener serves it when the group has more than one rank.
  ControlChannel(MPI_Comm comm, std::vector<int> world_ranks, std::string group_name);
  ~ControlChannel();  // shutdown()
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  // Leaves the listener and frees the duplicate communicator. Idempotent; afterwards
  // diagnose() returns "" and nothing else below may be called.
  void shutdown();

  // Numbers the group's next collective and remembers its signature; returns its number
  // (1, 2, ...). Called by the caller of each collective, in call order.
  int64_t record(const CallSignature& signature);

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

 private:
  struct Record {
    int64_t seq = 0;  // 0: none
    CallSignature signature;
  };
  // A listener's answer about call `asked`: the rank's latest call, and its call number
  // `asked` if it has made it and still remembers it (else seq 0).
  struct Answer {
    Record latest, asked;
  };
  struct Query {
    int64_t seq = 0;
    int32_t reply_tag = 0, unused = 0;
  };
  static constexpr int kTagQuery = 0;
  static constexpr size_t kRemembered = 64;  // calls each rank keeps for answers

  std::string diagnose_locked(int64_t seq, const CallSignature& signature);  // under check_mutex_
  // Under check_mutex_: all-gathers `bytes` bytes from every rank (the same number on each)
  // over the control communicator, rank r's at [r * bytes, (r + 1) * bytes) of the result;
  // the debug check of call `seq`. Throws Error with diagnose()'s account when not every
  // rank has come by `deadline`.
  std::vector<char> exchange_locked(const void* mine, size_t bytes, int64_t seq,
                                    const CallSignature& signature, Clock::time_point deadline);
  Answer answer_for(int64_t seq);
  void stop_listening();  // by shutdown(): leaves the listener, ends its pending requests
  bool serve_queries();                   // by the listener; false when MPI failed
  std::string rank_name(int rank) const;  // "rank 1" or "rank 1 (world rank 3)"
  std::string call_text(const Record& record) const;

  MPI_Comm control_ = MPI_COMM_NULL;
  std::vector<int> world_ranks_;
  std::string group_name_;
  int rank_ = 0, size_ = 1;

  std::mutex mutex_;  // the records; shut_down_
  int64_t latest_ = 0;
  std::array<Record, kRemembered> records_{};
  bool shut_down_ = false;

  std::mutex check_mutex_;  // one check_same() or diagnose() at a time
  int32_t queries_ = 0;     // under check_mutex_: makes each diagnose()'s reply tag fresh

  // The listener's own (served under its mutex), then stop_listening()'s.
  Query query_{};
  MPI_Request query_request_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> reply_requests_;
  std::vector<std::unique_ptr<Answer>> replies_;  // parallel; buffers stay put while in flight

};

}  // namespace dpt::dist
