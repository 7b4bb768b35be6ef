#include "parallel/pipeline_schedule.h"

#include <algorithm>

namespace dpt::dist {

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int stages, int stage,
                                             int micro_batches) {
  std::vector<PipelineAction> actions;
  const int warmup =
      schedule == PipelineSchedule::gpipe ? micro_batches : std::min(stages - stage - 1, micro_batches);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) actions.push_back({true, next_forward});
  while (next_forward < micro_batches) {  // 1F1B's steady state: one forward, one backward
    actions.push_back({true, next_forward++});
    actions.push_back({false, next_backward++});
  }
  for (; next_backward < micro_batches; ++next_backward) actions.push_back({false, next_backward});
  return actions;
}

int pipeline_max_in_flight(PipelineSchedule schedule, int stages, int stage, int micro_batches) {
  int held = 0, most = 0;
  for (const PipelineAction& a : pipeline_actions(schedule, stages, stage, micro_batches)) {
    held += a.forward ? 1 : -1;
    most = std::max(most, held);
  }
  return most;
}

double pipeline_bubble_theory(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / (micro_batches + stages - 1);
}

}  // namespace dpt::dist
