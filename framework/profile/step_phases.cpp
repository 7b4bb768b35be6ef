#include "profile/step_phases.h"

namespace dpt::profile {
namespace {

// By Phase: its JSON key and its name in timelines and reports.
constexpr const char* kKeys[] = {"data_ms", "forward_ms", "backward_ms", "comm_wait_ms", "optimizer_ms"};
constexpr const char* kNames[] = {"data wait", "forward", "backward", "allreduce wait", "optimizer"};

}  // namespace

StepPhases& StepPhases::operator+=(const StepPhases& other) {
  for (Phase p : kPhases) (*this)[p] += other[p];
  return *this;
}

StepPhases StepPhases::scaled(double factor) const {
  StepPhases out;
  for (Phase p : kPhases) out[p] = (*this)[p] * factor;
  return out;
}

io::JsonOut& StepPhases::add_to(io::JsonOut& json) const {
  for (Phase p : kPhases) json[kKeys[static_cast<int>(p)]] = (*this)[p];
  json["step_ms"] = step_ms();
  return json;
}

const char* phase_name(Phase phase) { return kNames[static_cast<int>(phase)]; }

}  // namespace dpt::profile
