#include "profile/step_phases.h"

#include "comm/dist.h"

namespace dpt::profile {

double& StepPhases::operator[](Phase phase) {
  switch (phase) {
    case Phase::data:
      return data_ms;
    case Phase::forward:
      return forward_ms;
    case Phase::backward:
      return backward_ms;
    case Phase::comm_wait:
      return comm_wait_ms;
    case Phase::optimizer:
      return optimizer_ms;
  }
  return data_ms;  // unreachable: every Phase is listed
}

StepPhases& StepPhases::operator+=(const StepPhases& other) {
  data_ms += other.data_ms;
  forward_ms += other.forward_ms;
  backward_ms += other.backward_ms;
  comm_wait_ms += other.comm_wait_ms;
  optimizer_ms += other.optimizer_ms;
  return *this;
}

StepPhases StepPhases::scaled(double factor) const {
  return {data_ms * factor, forward_ms * factor, backward_ms * factor, comm_wait_ms * factor,
          optimizer_ms * factor};
}

io::JsonOut& StepPhases::add_to(io::JsonOut& json) const {
  json["data_ms"] = data_ms;
  json["forward_ms"] = forward_ms;
  json["backward_ms"] = backward_ms;
  json["comm_wait_ms"] = comm_wait_ms;
  json["optimizer_ms"] = optimizer_ms;
  json["step_ms"] = step_ms();
  return json;
}

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::data:
      return "data wait";
    case Phase::forward:
      return "forward";
    case Phase::backward:
      return "backward";
    case Phase::comm_wait:
      return "allreduce wait";
    case Phase::optimizer:
      return "optimizer";
  }
  return "";
}

StepPhases mean_over_ranks(const StepPhases& mine) {
  const int ranks = dist::info().world_size;
  if (ranks == 1) return mine;
  Tensor t = Tensor::from_vector(
      std::vector<float>{static_cast<float>(mine.data_ms), static_cast<float>(mine.forward_ms),
                         static_cast<float>(mine.backward_ms), static_cast<float>(mine.comm_wait_ms),
                         static_cast<float>(mine.optimizer_ms)},
      {5});
  dist::world()->all_reduce(t, dist::ReduceOp::sum)->wait();
  const float* s = t.data<float>();
  return StepPhases{s[0], s[1], s[2], s[3], s[4]}.scaled(1.0 / ranks);
}

}  // namespace dpt::profile
