// The flight recorder: what each rank's groups were doing when a job hung or failed. Every
// process group keeps its last collectives in a fixed ring (number, op, dtype, count,
// root, state, times); on a timeout, a fatal error (abort_all) or SIGUSR2 the rank writes
// all its rings as one JSON file, DIR/rank-R.json, that tools/flight.py reads across ranks.
// CUDA collectives pass through the same ring (the front end records them before NCCL runs
// them; the watchdog marks them completed).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dpt::dist {

enum class FlightState { queued, started, completed };

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

// A collective and its number in its group (1, 2, ...); seq 0: none.
struct NumberedCall {
  int64_t seq = 0;
  CallSignature signature;
};

// The last `slots` collectives of one group: the one record of them that the dumps and the
// control channel's answers (control_channel.h) both read. Thread-safe: the caller records
// `queued`, the poll token's holder `started` and `completed` (comm_thread.h).
class FlightRing {
 public:
  static constexpr size_t kSlots = 64;

  // requires slots > 0; world_ranks[r]: the world rank of group rank r.
  FlightRing(std::string group, int rank, std::vector<int> world_ranks, size_t slots = kSlots);

  // Numbers the group's next collective (in call order) and records it; returns its number.
  // Overwrites the slot of call seq - slots.
  int64_t queued(const CallSignature& signature);
  // For a call still in the ring; later calls (or ones overwritten) are ignored.
  void started(int64_t seq) { mark(seq, FlightState::started); }
  void completed(int64_t seq) { mark(seq, FlightState::completed); }
  NumberedCall latest() const;
  NumberedCall find(int64_t seq) const;  // seq 0 when call `seq` is not (or no longer) in the ring
  const std::string& group() const { return group_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  // {"group", "rank", "world_ranks", "slots", "entries": [oldest first: {"seq", "op",
  // "reduce"?, "dtype", "count"?, "root"?, "state", "queued_us", "started_us"?,
  // "completed_us"?}]}; times are microseconds of the system clock since the Unix epoch.
  nlohmann::json to_json() const;

 private:
  struct Entry {
    NumberedCall call;
    FlightState state = FlightState::queued;
    int64_t queued_us = 0, started_us = 0, completed_us = 0;
  };
  void mark(int64_t seq, FlightState state);

  const std::string group_;
  const int rank_;
  const std::vector<int> world_ranks_;
  mutable std::mutex mutex_;
  std::vector<Entry> slots_;  // call seq in slot seq % size
  int64_t latest_ = 0;
};

// Every ring made by a group of this rank, dumped together; the registry keeps weak
// references, so a destroyed group's ring leaves the dumps.
void flight_register(const std::shared_ptr<FlightRing>& ring);

// Where dumps go: the directory set last, else $DPT_FLIGHT_DIR, else "flight" under the
// working directory. train sets output.dir/flight.
void set_flight_dir(const std::string& dir);
std::string flight_dir();

// dist::init() and finalize(): the rank's number for the file name, and a thread that
// writes a dump whenever SIGUSR2 arrives (the handler only writes a byte to a pipe). The
// run goes on after SIGUSR2. Calling start again only updates the rank.
void flight_start(int rank, int world_size);
void flight_stop();

// Writes DIR/rank-R.json (through a temporary file and rename, so a reader never sees half
// of one) with `reason` and every live ring; returns its path, or "" when flight_start()
// was not called or writing failed. Never throws.
std::string flight_dump(const std::string& reason);

}  // namespace dpt::dist
