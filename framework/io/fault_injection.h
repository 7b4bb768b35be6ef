// Faults on purpose, for the tests that show what a run does when a rank dies, is told to
// stop, or computes a NaN:
//   DPT_DEBUG_FAULT=KIND@STEP[:RANK][,KIND@STEP[:RANK]...]
// KIND is sigkill or sigterm (the rank sends itself that signal as global step STEP, from
// 1, begins) or nan (that step's loss is multiplied by NaN after the forward pass). Without
// RANK every rank does it. Unset, nothing happens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dpt::io {

class FaultInjection {
 public:
  // Reads DPT_DEBUG_FAULT for `rank`. Throws dpt::Error naming the variable and the
  // expected form when the value is malformed.
  static FaultInjection from_env(int rank);
  // Parses `spec` (the variable's value) for `rank`.
  FaultInjection(const std::string& spec, int rank);
  FaultInjection() = default;

  void before_step(int64_t step) const;  // raises the signals due at `step` on this rank
  bool nan_at(int64_t step) const;       // this rank's loss at `step` is to be NaN

 private:
  enum class Kind { sigkill, sigterm, nan };
  struct Fault {
    Kind kind;
    int64_t step;
  };
  std::vector<Fault> faults_;  // those for this rank only
};

}  // namespace dpt::io
