// The step of a run with the model cut into pipeline stages (parallel.pp > 1): it sends
// its micro-batches through the stages (dist::Pipeline). The plan that makes it, wraps the
// stage and gathers the stages back into the whole model is parallel_plan.h's.
#pragma once

#include <memory>

#include "parallel/pipeline.h"
#include "io/config.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "train/parallel.h"
#include "train/step.h"

namespace dpt::train {

// One training step through the pipeline: every rank of a pipeline group passes the same
// batch; the loss is the cross-entropy of the last stage's output. A step is applied or
// stopped on every rank alike (the non-finite verdict is agreed over the world).
class PipelineStep : public Step {
 public:
  PipelineStep(const io::Config& config, nn::ModulePtr stage, const ParallelLayout& layout,
               optim::Optimizer& optimizer);
  io::RunControl::StepAction run(const data::Batch& batch, float lr, StepAt at, StepHooks hooks) override;

  // The measured bubble: the time stages waited (for their neighbours and messages) over
  // their step time, summed over the world's ranks and the steps since the last call.
  // Collective over the world.
  double take_bubble();
  // What the schedule's arithmetic predicts for equal stages: (S - 1) / (M + S - 1).
  double bubble_theory() const;

 private:
  dist::Pipeline pipeline_;
  optim::Optimizer& optimizer_;
  std::vector<Tensor> params_;         // the stage's
  io::RunControl* control_ = nullptr;  // the step's, for the loss hook
  double idle_ms_ = 0, step_ms_ = 0;   // since take_bubble
};

}  // namespace dpt::train
