#include "profile/step_phases.h"

#include "comm/dist.h"

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

StepPhases mean_over_ranks(const StepPhases& mine) {
  const int ranks = dist::info().world_size;
  if (ranks == 1) return mine;
  Tensor t = Tensor::from_vector(std::vector<float>(mine.ms.begin(), mine.ms.end()), {5});
  dist::world()->all_reduce(t, dist::ReduceOp::sum)->wait();
  StepPhases sum;
  for (size_t i = 0; i < sum.ms.size(); ++i) sum.ms[i] = t.data<float>()[i];
  return sum.scaled(1.0 / ranks);
}

}  // namespace dpt::profile
