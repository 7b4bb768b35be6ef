#include "optim/schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace dpt::optim {

LrSchedule::LrSchedule(float base_lr, ScheduleOptions options, int64_t steps_per_epoch, int64_t epochs)
    : base_lr_(base_lr),
      options_(std::move(options)),
      steps_per_epoch_(steps_per_epoch),
      total_steps_(steps_per_epoch * epochs),
      warmup_steps_(options_.warmup_epochs * steps_per_epoch) {
  DPT_CHECK(steps_per_epoch > 0 && epochs > 0) << "lr schedule: needs at least one step and one epoch";
}

float LrSchedule::lr_at(int64_t step) const {
  if (step < warmup_steps_) return base_lr_ * static_cast<float>(step + 1) / static_cast<float>(warmup_steps_);
  switch (options_.kind) {
    case ScheduleKind::constant: return base_lr_;
    case ScheduleKind::multistep: {
      float lr = base_lr_;
      for (int64_t milestone : options_.milestones)
        if (step >= milestone * steps_per_epoch_) lr *= static_cast<float>(options_.gamma);
      return lr;
    }
    case ScheduleKind::cosine: {
      int64_t span = std::max<int64_t>(1, total_steps_ - warmup_steps_);
      double progress = std::min(1.0, static_cast<double>(step - warmup_steps_) / static_cast<double>(span));
      const float min_lr = static_cast<float>(options_.min_lr);
      return min_lr + (base_lr_ - min_lr) * static_cast<float>(0.5 * (1 + std::cos(std::numbers::pi * progress)));
    }
  }
  return base_lr_;
}

}  // namespace dpt::optim
