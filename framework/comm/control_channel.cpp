// The control channel of control_channel.h: the answers to other ranks' questions about the
// group's calls, the debug check, and the account of a timed-out collective. Every
// MPI call goes through MPI_CHECK (so under MPI_THREAD_SERIALIZED it takes the process-wide
// MPI mutex); serve_queries() and diagnose() turn failures into text instead of throwing,
// since they run when something has already gone wrong.
#include "comm/control_channel.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "comm/comm_thread.h"
#include "comm/process_group.h"
#include "comm/mpi_check.h"

namespace dpt::dist {
namespace {

using Clock = ControlChannel::Clock;

// Tests `request` until it completes or `deadline` passes: yields at first (the answer is
// usually there within microseconds), then sleeps up to 1 ms between tests so a long wait
// does not take a core from the ranks it waits for. false: timed out.
bool test_until(MPI_Request& request, Clock::time_point deadline) {
  int sleep_us = 0;
  for (;;) {
    int done = 0;
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return true;
    if (Clock::now() >= deadline) return false;
    if (sleep_us == 0) {
      sched_yield();
      sleep_us = 1;
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min(sleep_us * 2, 1000);
    }
  }
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace

ControlChannel::ControlChannel(MPI_Comm comm, std::shared_ptr<const FlightRing> calls)
    : calls_(std::move(calls)) {
  MPI_CHECK(MPI_Comm_dup(comm, &control_));
  MPI_CHECK(MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(control_, &rank_));
  MPI_CHECK(MPI_Comm_size(control_, &size_));
  if (size_ > 1) {
    MPI_CHECK(
        MPI_Irecv(&query_, sizeof(Query), MPI_BYTE, MPI_ANY_SOURCE, kTagQuery, control_, &query_request_));
    thread_ = CommThread::acquire();
    thread_->listen(this);
  }
}

ControlChannel::~ControlChannel() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpt: shutting down the control channel of %s: %s\n", calls_->group().c_str(), e.what());
  }
}

void ControlChannel::shutdown() {
  if (shut_down_.exchange(true)) return;
  if (thread_) {
    thread_->unlisten(this);
    thread_.reset();
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  try {
    if (query_request_ != MPI_REQUEST_NULL) {
      MPI_CHECK(MPI_Cancel(&query_request_));
      MPI_CHECK(MPI_Wait(&query_request_, MPI_STATUS_IGNORE));
    }
    // Answers are a few bytes and leave at once; one still pending goes to a rank that is
    // gone, so give it a moment, then let MPI finish it alone and keep its buffer alive.
    const Clock::time_point until = Clock::now() + kListenInterval;
    for (size_t i = 0; i < reply_requests_.size(); ++i) {
      if (!test_until(reply_requests_[i], until)) {
        MPI_CHECK(MPI_Request_free(&reply_requests_[i]));
        (void)replies_[i].release();
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpt: control channel of %s: %s\n", calls_->group().c_str(), e.what());
  }
  MPI_CHECK(MPI_Comm_free(&control_));
}

bool ControlChannel::serve_queries() {
  try {
    for (;;) {
      int done = 0;
      MPI_Status status;
      MPI_CHECK(MPI_Test(&query_request_, &done, &status));
      if (!done) break;
      // A question means a collective timed out on the asking rank, which is about to end the
      // job: this rank writes its flight record first, while it still can.
      flight_dump("query from rank " + std::to_string(status.MPI_SOURCE) + " of " + calls_->group() +
                  " about its collective #" + std::to_string(query_.seq));
      replies_.push_back(std::make_unique<Answer>(Answer{calls_->latest(), calls_->find(query_.seq)}));
      reply_requests_.push_back(MPI_REQUEST_NULL);
      MPI_CHECK(MPI_Isend(replies_.back().get(), sizeof(Answer), MPI_BYTE, status.MPI_SOURCE,
                          query_.reply_tag, control_, &reply_requests_.back()));
      MPI_CHECK(
          MPI_Irecv(&query_, sizeof(Query), MPI_BYTE, MPI_ANY_SOURCE, kTagQuery, control_, &query_request_));
    }
    for (size_t i = 0; i < reply_requests_.size();) {
      int done = 0;
      MPI_CHECK(MPI_Test(&reply_requests_[i], &done, MPI_STATUS_IGNORE));
      if (!done) {
        ++i;
        continue;
      }
      reply_requests_.erase(reply_requests_.begin() + static_cast<std::ptrdiff_t>(i));
      replies_.erase(replies_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpt: control channel of %s stops answering: %s\n", calls_->group().c_str(), e.what());
    return false;
  }
}

std::string ControlChannel::rank_name(int rank) const {
  std::string name = "rank " + std::to_string(rank);
  const int world_rank = calls_->world_ranks()[rank];
  if (world_rank != rank) name += " (world rank " + std::to_string(world_rank) + ")";
  return name;
}

std::string ControlChannel::call_text(const NumberedCall& call) const {
  if (call.seq == 0) return "none yet";
  return "#" + std::to_string(call.seq) + " " + signature_text(call.signature);
}

std::vector<char> ControlChannel::exchange_locked(const void* mine, size_t bytes, int64_t seq,
                                                  const CallSignature& signature,
                                                  Clock::time_point deadline) {
  // On the heap: a gather that times out stays in flight (MPI cannot cancel a collective),
  // so its buffers must outlive this call; they are leaked then, as the group is unusable.
  struct Exchange {
    std::vector<char> mine, all;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  auto owned = std::make_unique<Exchange>();
  Exchange* x = owned.get();
  x->mine.assign(static_cast<const char*>(mine), static_cast<const char*>(mine) + bytes);
  x->all.resize(bytes * static_cast<size_t>(size_));
  const int count = static_cast<int>(bytes);
  MPI_CHECK(
      MPI_Iallgather(x->mine.data(), count, MPI_BYTE, x->all.data(), count, MPI_BYTE, control_, &x->request));
  const Clock::time_point start = Clock::now();
  if (!test_until(x->request, deadline)) {
    (void)owned.release();
    DPT_FAIL() << calls_->group() << ": collective " << call_text({seq, signature})
               << ": not every rank reached the "
               << "debug: collectives check within " << seconds_text(deadline - start)
               << diagnose_locked(seq, signature) << " (do all ranks run with debug: collectives?)";
  }
  return std::move(x->all);
}

void ControlChannel::check_same(int64_t seq, const CallSignature& signature, Clock::time_point deadline) {
  if (size_ == 1) return;
  std::lock_guard<std::mutex> check(check_mutex_);
  const NumberedCall mine{seq, signature};
  const std::vector<char> bytes = exchange_locked(&mine, sizeof(NumberedCall), seq, signature, deadline);
  std::vector<NumberedCall> all(static_cast<size_t>(size_));
  std::memcpy(all.data(), bytes.data(), bytes.size());
  const NumberedCall& first = all[0];
  for (int r = 1; r < size_; ++r) {
    const NumberedCall& other = all[static_cast<size_t>(r)];
    if (other.seq == first.seq && other.signature == first.signature) continue;
    const bool same_seq = other.seq == first.seq;
    DPT_FAIL() << calls_->group() << ": collective #" << seq
               << " differs between ranks (debug: collectives): " << rank_name(0) << " calls "
               << (same_seq ? signature_text(first.signature) : call_text(first)) << ", " << rank_name(r)
               << " calls " << (same_seq ? signature_text(other.signature) : call_text(other));
  }
}

void ControlChannel::check_counts(int64_t seq, const CallSignature& signature,
                                  const std::vector<int64_t>& sends, const std::vector<int64_t>& receives,
                                  Clock::time_point deadline) {
  if (size_ == 1) return;
  DPT_CHECK(static_cast<int>(sends.size()) == size_ && static_cast<int>(receives.size()) == size_)
      << calls_->group() << ": check_counts needs one count per rank (" << size_ << "), got " << sends.size()
      << " and " << receives.size();
  std::lock_guard<std::mutex> check(check_mutex_);
  // Rank r's row: what it sends each rank, then what it expects from each.
  std::vector<int64_t> mine(sends);
  mine.insert(mine.end(), receives.begin(), receives.end());
  const size_t row = mine.size();
  const std::vector<char> bytes =
      exchange_locked(mine.data(), row * sizeof(int64_t), seq, signature, deadline);
  std::vector<int64_t> all(row * static_cast<size_t>(size_));
  std::memcpy(all.data(), bytes.data(), bytes.size());
  auto sent = [&](int from, int to) { return all[from * row + to]; };
  auto expected = [&](int to, int from) { return all[to * row + size_ + from]; };
  for (int from = 0; from < size_; ++from) {
    for (int to = 0; to < size_; ++to) {
      if (sent(from, to) == expected(to, from)) continue;
      DPT_FAIL() << calls_->group() << ": collective #" << seq << " " << signature_text(signature)
                 << ": the ranks' splits do not match (debug: collectives): " << rank_name(from) << " sends "
                 << sent(from, to) << " elements to " << rank_name(to) << ", which expects "
                 << expected(to, from) << " from it";
    }
  }
}

std::string ControlChannel::diagnose(int64_t seq, const CallSignature& signature) {
  if (size_ == 1) return "";
  if (shut_down_) return "";  // the watchdog may ask after the group has gone
  std::lock_guard<std::mutex> check(check_mutex_);
  return diagnose_locked(seq, signature);
}

std::string ControlChannel::diagnose_locked(int64_t seq, const CallSignature& signature) {
  // Replies carry a tag of their own, so a late answer to an earlier question is never
  // taken for this one's. On the heap: a send or receive that cannot be cancelled keeps
  // its buffer (leaked then).
  struct Exchange {
    Query query;
    std::vector<Answer> answers;
    std::vector<MPI_Request> receives, sends;
  };
  auto owned = std::make_unique<Exchange>();
  Exchange* x = owned.get();
  queries_ = queries_ % 32000 + 1;  // tags 1..32000, below every MPI_TAG_UB (>= 32767)
  x->query = {seq, queries_, 0};
  x->answers.resize(static_cast<size_t>(size_));
  x->receives.assign(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  x->sends.assign(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  std::vector<bool> answered(static_cast<size_t>(size_), false);
  bool leak = false;
  std::string failure;
  try {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_CHECK(MPI_Irecv(&x->answers[r], sizeof(Answer), MPI_BYTE, r, x->query.reply_tag, control_,
                          &x->receives[r]));
      MPI_CHECK(MPI_Isend(&x->query, sizeof(Query), MPI_BYTE, r, kTagQuery, control_, &x->sends[r]));
    }
    const Clock::time_point deadline = Clock::now() + kAnswerWait;
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) answered[r] = test_until(x->receives[r], deadline);
    }
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      if (!answered[r]) {
        MPI_CHECK(MPI_Cancel(&x->receives[r]));
        int cancelled = 0;
        MPI_Status status;
        MPI_CHECK(MPI_Wait(&x->receives[r], &status));
        MPI_CHECK(MPI_Test_cancelled(&status, &cancelled));
        answered[r] = !cancelled;  // it came in after all
      }
      int sent = 0;
      MPI_CHECK(MPI_Test(&x->sends[r], &sent, MPI_STATUS_IGNORE));
      if (!sent) {
        MPI_CHECK(MPI_Request_free(&x->sends[r]));
        leak = true;
      }
    }
  } catch (const std::exception& e) {
    failure = e.what();
    leak = true;
  }
  if (leak) (void)owned.release();
  if (!failure.empty()) return "; could not ask the other ranks: " + failure;

  std::vector<std::string> missing, different, silent;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const Answer& a = x->answers[r];
    if (!answered[r]) {
      silent.push_back(rank_name(r));
    } else if (a.asked.seq == seq) {
      if (!(a.asked.signature == signature))
        different.push_back(rank_name(r) + " as " + signature_text(a.asked.signature));
    } else if (a.latest.seq < seq) {
      missing.push_back(rank_name(r) + " (its latest collective on " + calls_->group() + ": " +
                        call_text(a.latest) + ")");
    }
  }
  std::string text;
  if (!missing.empty()) text += "; did not arrive: " + join(missing);
  if (!different.empty())
    text += "; called it with other arguments: " + join(different) +
            " (debug: collectives checks each call before it runs)";
  if (!silent.empty()) text += "; no answer within " + seconds_text(kAnswerWait) + " from " + join(silent);
  if (text.empty())
    text = "; every rank called it with the same arguments (is one stuck in another group's collective?)";
  return text;
}

}  // namespace dpt::dist
