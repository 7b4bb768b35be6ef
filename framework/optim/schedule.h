// Learning rate as a function of the global step: optional linear warmup from 0, then
// constant, multistep (x gamma at each milestone epoch) or cosine decay to min_lr.
#pragma once

#include <cstdint>
#include <vector>

namespace dpt::optim {

enum class ScheduleKind { constant, multistep, cosine };

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::constant;
  double warmup_epochs = 0;
  std::vector<int64_t> milestones;  // epochs, for multistep
  float gamma = 0.1f;
  float min_lr = 0.0f;  // for cosine
};

class LrSchedule {
 public:
  LrSchedule(float base_lr, ScheduleOptions options, int64_t steps_per_epoch, int64_t epochs);
  float lr_at(int64_t step) const;  // step counts from 0 over the whole run

 private:
  float base_lr_;
  ScheduleOptions options_;
  int64_t steps_per_epoch_, total_steps_, warmup_steps_;
};

}  // namespace dpt::optim
