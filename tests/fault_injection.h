// Faults on purpose, for the tests that show what a run does when a rank dies, is told to
// stop, or computes a NaN:
//   DPT_DEBUG_FAULT=KIND@STEP[:RANK][,KIND@STEP[:RANK]...]
// KIND is sigkill or sigterm (the rank sends itself that signal as global step STEP, from
// 1, begins), nan (that step's loss is multiplied by NaN after the forward pass), slow
// (from step STEP on, the rank sleeps kSlowMs before each step's forward: a straggler) or
// hang (at step STEP the rank sleeps kHangS before its forward: the others time out).
// Without RANK every rank does it. Only the test program train_faults (train_faults.cpp) reads the
// variable; the library offers the seam it uses (io::StepHook) and knows nothing of faults.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace dpt::testing {

class FaultInjection {
 public:
  static constexpr int kSlowMs = 40;
  static constexpr int kHangS = 600;

  // Parses `spec` (the variable's value; "" for no faults). Throws dpt::Error naming the
  // variable and the expected form when the value is malformed.
  explicit FaultInjection(const std::string& spec) {
    static const std::regex pattern(R"((sigkill|sigterm|nan|slow|hang)@(\d{1,15})(?::(\d{1,9}))?)");
    std::stringstream items(spec);
    for (std::string item; std::getline(items, item, ',');) {
      std::smatch m;
      DPT_CHECK(std::regex_match(item, m, pattern))
          << "DPT_DEBUG_FAULT=" << spec
          << ": expected KIND@STEP[:RANK] items separated by commas, KIND one of "
          << "sigkill, sigterm, nan, slow, hang (e.g. nan@5:1), got '" << item << "'";
      Kind kind = m[1] == "sigkill"   ? Kind::sigkill
                  : m[1] == "sigterm" ? Kind::sigterm
                  : m[1] == "slow"    ? Kind::slow
                  : m[1] == "hang"    ? Kind::hang
                                      : Kind::nan;
      faults_.push_back({kind, std::stoll(m[2].str()), m[3].matched ? std::stoi(m[3].str()) : -1});
    }
  }

  // Raises the signals due at `step` on `rank`, and sleeps there when it is slowed.
  void before_step(int64_t step, int rank) const {
    for (const Fault& f : faults_) {
      if (f.kind == Kind::slow && step >= f.step && f.on(rank))
        std::this_thread::sleep_for(std::chrono::milliseconds(kSlowMs));
      if (!f.applies(step, rank)) continue;
      if (f.kind == Kind::hang) std::this_thread::sleep_for(std::chrono::seconds(kHangS));
      if (f.kind == Kind::sigkill) std::raise(SIGKILL);
      if (f.kind == Kind::sigterm) std::raise(SIGTERM);
    }
  }

  // Whether `rank`'s loss at `step` is to be NaN.
  bool nan_at(int64_t step, int rank) const {
    for (const Fault& f : faults_)
      if (f.kind == Kind::nan && f.applies(step, rank)) return true;
    return false;
  }

 private:
  enum class Kind { sigkill, sigterm, nan, slow, hang };
  struct Fault {
    Kind kind;
    int64_t step;
    int rank;  // -1: every rank
    bool on(int r) const { return rank < 0 || rank == r; }
    bool applies(int64_t at, int r) const { return step == at && on(r); }
  };
  std::vector<Fault> faults_;
};

}  // namespace dpt::testing
