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

// One collective as every rank of its group calls it. Strings are static (op and dtype
// names), so recording one copies no heap memory.
struct FlightCall {
  int64_t seq = 0;               // its number in the group, 1, 2, ...
  const char* op = "";           // "all_reduce"
  const char* reduce = nullptr;  // "sum" for reductions, else null
  const char* dtype = "";        // "f32"
  int64_t count = -1;            // elements (as in the ControlChannel signature); -1: none
  int root = -1;                 // of rooted collectives; -1: none
};

// The last `slots` collectives of one group. Thread-safe: the caller records `queued`, the
// poll token's holder `started` and `completed` (comm_thread.h).
class FlightRing {
 public:
  static constexpr size_t kSlots = 64;

  // requires slots > 0; world_ranks[r]: the world rank of group rank r.
  FlightRing(std::string group, int rank, std::vector<int> world_ranks, size_t slots = kSlots);

  // requires call.seq one more than the previous call's (the group numbers them in call
  // order). Overwrites the slot of call seq - slots.
  void queued(const FlightCall& call);
  // For a call still in the ring; later calls (or ones overwritten) are ignored.
  void started(int64_t seq) { mark(seq, FlightState::started); }
  void completed(int64_t seq) { mark(seq, FlightState::completed); }

  // {"group", "rank", "world_ranks", "slots", "entries": [oldest first: {"seq", "op",
  // "reduce"?, "dtype", "count"?, "root"?, "state", "queued_us", "started_us"?,
  // "completed_us"?}]}; times are microseconds of the system clock since the Unix epoch.
  nlohmann::json to_json() const;

 private:
  struct Entry {
    FlightCall call;
    FlightState state = FlightState::queued;
    int64_t queued_us = 0, started_us = 0, completed_us = 0;
  };
  void mark(int64_t seq, FlightState state);

  const std::string group_;
  const int rank_;
  const std::vector<int> world_ranks_;
  mutable std::mutex mutex_;
  std::vector<Entry> slots_;  // call seq in slot seq % size
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
