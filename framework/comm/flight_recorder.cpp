// The rings of flight_recorder.h and the process-wide registry that dumps them. The
// registry is global because a signal, a dying rank and a peer's timeout query must all
// find every group's ring without a handle to any of them.
#include "comm/flight_recorder.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "comm/mpi_op.h"

namespace dpt::dist {
namespace {

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* state_name(FlightState state) {
  static constexpr const char* kNames[] = {"queued", "started", "completed"};
  return kNames[static_cast<int>(state)];
}

struct Registry {
  std::mutex mutex;  // the fields below
  std::vector<std::weak_ptr<FlightRing>> rings;
  std::string dir;                // set_flight_dir's; empty: the environment's or the default
  int rank = -1, world_size = 0;  // -1: flight_start() not called
  std::thread signal_thread;
  int pipe[2] = {-1, -1};  // SIGUSR2 handler -> signal_thread
  struct sigaction previous {};
};

Registry& registry() {
  static Registry r;
  return r;
}

// Read by the signal handler: a plain int, set before the handler is installed.
volatile sig_atomic_t g_signal_fd = -1;

void on_sigusr2(int) {
  const int saved = errno;
  const char byte = 'd';
  if (g_signal_fd >= 0) [[maybe_unused]]
    ssize_t n = write(g_signal_fd, &byte, 1);
  errno = saved;
}

void signal_loop(int fd) {
  prctl(PR_SET_NAME, "dpt-flight", 0UL, 0UL, 0UL);  // as top -H and /proc name it
  char byte = 0;
  while (true) {
    ssize_t n = read(fd, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || byte == 'q') return;
    flight_dump("SIGUSR2");
  }
}

}  // namespace

FlightRing::FlightRing(std::string group, int rank, std::vector<int> world_ranks, size_t slots)
    : group_(std::move(group)), rank_(rank), world_ranks_(std::move(world_ranks)), slots_(slots) {}

int64_t FlightRing::queued(const CallSignature& signature) {
  const int64_t t = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t seq = ++latest_;
  slots_[static_cast<size_t>(seq) % slots_.size()] = Entry{{seq, signature}, FlightState::queued, t, 0, 0};
  return seq;
}

void FlightRing::mark(int64_t seq, FlightState state) {
  const int64_t t = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& e = slots_[static_cast<size_t>(seq) % slots_.size()];
  if (e.call.seq != seq) return;
  e.state = state;
  (state == FlightState::started ? e.started_us : e.completed_us) = t;
}

NumberedCall FlightRing::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return slots_[static_cast<size_t>(latest_) % slots_.size()].call;  // seq 0 before the first call
}

NumberedCall FlightRing::find(int64_t seq) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const NumberedCall& call = slots_[static_cast<size_t>(seq > 0 ? seq : 0) % slots_.size()].call;
  return seq > 0 && call.seq == seq ? call : NumberedCall{};
}

nlohmann::json FlightRing::to_json() const {
  std::vector<Entry> entries;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Entry& e : slots_)
      if (e.call.seq > 0) entries.push_back(e);
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.call.seq < b.call.seq; });
  nlohmann::json list = nlohmann::json::array();
  for (const Entry& e : entries) {
    const CallSignature& sig = e.call.signature;
    const auto kind = static_cast<OpKind>(sig.op);
    nlohmann::json j = {{"seq", e.call.seq}, {"op", op_kind_name(kind)}};
    if (is_reduction(kind)) j["reduce"] = reduce_op_name(static_cast<ReduceOp>(sig.reduce));
    j["dtype"] = dtype_name(static_cast<DType>(sig.dtype));
    if (kind != OpKind::barrier && kind != OpKind::all_to_all) j["count"] = sig.count;
    if (is_rooted(kind)) j["root"] = sig.root;
    j["state"] = state_name(e.state);
    j["queued_us"] = e.queued_us;
    if (e.started_us) j["started_us"] = e.started_us;
    if (e.completed_us) j["completed_us"] = e.completed_us;
    list.push_back(std::move(j));
  }
  return {{"group", group_},
          {"rank", rank_},
          {"world_ranks", world_ranks_},
          {"slots", slots_.size()},
          {"entries", std::move(list)}};
}

void flight_register(const std::shared_ptr<FlightRing>& ring) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::erase_if(r.rings, [](const auto& w) { return w.expired(); });
  r.rings.push_back(ring);
}

void set_flight_dir(const std::string& dir) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.dir = dir;
}

std::string flight_dir() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.dir.empty()) return r.dir;
  const char* env = std::getenv("DPT_FLIGHT_DIR");
  return env && *env ? env : "flight";
}

void flight_start(int rank, int world_size) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const bool running = r.rank >= 0;
  r.rank = rank;
  r.world_size = world_size;
  if (running || ::pipe(r.pipe) != 0) return;
  g_signal_fd = r.pipe[1];
  r.signal_thread = std::thread(signal_loop, r.pipe[0]);
  struct sigaction action {};
  action.sa_handler = on_sigusr2;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR2, &action, &r.previous);
}

void flight_stop() {
  Registry& r = registry();
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.rank < 0) return;
    sigaction(SIGUSR2, &r.previous, nullptr);
    g_signal_fd = -1;
    const char quit = 'q';
    [[maybe_unused]] ssize_t n = write(r.pipe[1], &quit, 1);
    thread = std::move(r.signal_thread);
    r.rank = -1;
  }
  if (thread.joinable()) thread.join();  // outside the lock: a dump in progress takes it
  close(r.pipe[0]);
  close(r.pipe[1]);
  r.pipe[0] = r.pipe[1] = -1;
}

std::string flight_dump(const std::string& reason) {
  try {
    const std::string dir = flight_dir();
    Registry& r = registry();
    std::vector<std::shared_ptr<FlightRing>> rings;
    nlohmann::json dump;
    {
      std::lock_guard<std::mutex> lock(r.mutex);
      if (r.rank < 0) return "";
      for (const auto& w : r.rings)
        if (auto ring = w.lock()) rings.push_back(std::move(ring));
      char host[256] = "";
      gethostname(host, sizeof host - 1);
      dump = {{"rank", r.rank},  {"world_size", r.world_size}, {"host", host},
              {"pid", getpid()}, {"reason", reason},           {"time_us", now_us()}};
    }
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& ring : rings) groups.push_back(ring->to_json());
    dump["groups"] = std::move(groups);
    // Every rank of a timed-out job makes the folder at about the same moment: another
    // rank's mkdir between the check and this one's is no error (the open below says if
    // the folder really is missing).
    std::error_code made;
    std::filesystem::create_directories(dir, made);
    const std::string path = dir + "/rank-" + std::to_string(dump["rank"].get<int>()) + ".json";
    // Two threads of a rank may dump at once (its own timeout, a peer's query): one name each.
    static std::atomic<int> dumps{0};
    const std::string temporary = path + ".tmp" + std::to_string(getpid()) + "-" + std::to_string(dumps++);
    {
      std::ofstream out(temporary);
      out << dump.dump(1) << "\n";
      if (!out.flush()) throw std::runtime_error("cannot write " + temporary);
    }
    std::filesystem::rename(temporary, path);
    return path;
  } catch (const std::exception& e) {
    // A dump is written on the way to an error; it must not replace that error, but the
    // person reading it should know why there is no record.
    std::fprintf(stderr, "flight record not written to %s: %s\n", flight_dir().c_str(), e.what());
    return "";
  }
}

}  // namespace dpt::dist
