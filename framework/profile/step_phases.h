// Where a training step's time goes: waiting for the next batch, forward, backward compute,
// waiting after backward for the all-reduces it did not hide (exposed communication), and
// the optimizer. The five add up to the step; train writes their means per step.
#pragma once

#include <array>
#include <numeric>

#include "io/json.h"

namespace dpt::profile {

enum class Phase { data, forward, backward, comm_wait, optimizer };
constexpr Phase kPhases[] = {Phase::data, Phase::forward, Phase::backward, Phase::comm_wait,
                             Phase::optimizer};

struct StepPhases {
  std::array<double, 5> ms{};  // by Phase

  double& operator[](Phase phase) { return ms[static_cast<size_t>(phase)]; }
  double operator[](Phase phase) const { return ms[static_cast<size_t>(phase)]; }
  double step_ms() const { return std::accumulate(ms.begin(), ms.end(), 0.0); }
  StepPhases& operator+=(const StepPhases& other);
  StepPhases scaled(double factor) const;
  // Sets data_ms, forward_ms, backward_ms, comm_wait_ms, optimizer_ms and step_ms in `json`.
  io::JsonOut& add_to(io::JsonOut& json) const;
};

// "data wait", "forward", "backward", "allreduce wait", "optimizer": for timelines and reports.
const char* phase_name(Phase phase);

// A step's collectives and their bytes on this rank (comm/process_group.h's
// CollectiveCounts), as a mean over steps: the round trips the step makes.
struct StepTraffic {
  double collectives = 0, bytes = 0;
};

}  // namespace dpt::profile
