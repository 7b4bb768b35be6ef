// Learning rate as a function of the global step: optional linear warmup from 0, then
// constant, multistep (x gamma at each milestone epoch) or cosine decay to min_lr.
#pragma once

#include <cstdint>
#include <vector>

namespace dpt::optim {

enum class ScheduleKind { constant, multistep, cosine };

// The config's `schedule` section holds one (io/config.h); the schema gives its defaults.
struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::constant;
  int64_t warmup_epochs = 0;
  std::vector<int64_t> milestones;  // epochs, for multistep
  double gamma = 0.1;
  double min_lr = 0;  // for cosine
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
