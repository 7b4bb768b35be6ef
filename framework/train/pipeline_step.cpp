#include "train/pipeline_step.h"

#include <cmath>

#include "comm/dist.h"
#include "ops/loss.h"
#include "optim/nonfinite.h"

namespace dpt::train {

PipelineStep::PipelineStep(const io::Config& config, nn::ModulePtr stage, const ParallelLayout& layout,
                           optim::Optimizer& optimizer)
    : pipeline_(
          stage, layout.pp_group,
          [this, smoothing = static_cast<float>(config.label_smoothing)](const Tensor& out, const Tensor& y) {
            return control_->loss_hook(cross_entropy(out, y, smoothing));
          },
          {.micro_batches = static_cast<int>(config.pipeline.micro_batches),
           .schedule = config.pipeline.schedule}),
      optimizer_(optimizer),
      params_(stage->parameters()) {}

io::RunControl::StepAction PipelineStep::run(const data::Batch& batch, float lr, StepAt at, StepHooks hooks) {
  using StepAction = io::RunControl::StepAction;
  control_ = &hooks.control;
  optimizer_.zero_grad();
  const dist::PipelineStepStats stats = pipeline_.train_step(batch.images, batch.labels);
  hooks.profiler.lap(profile::Phase::forward);  // forwards and backwards interleave: all timed as forward
  idle_ms_ += stats.idle_ms;
  step_ms_ += stats.step_ms;
  // Each stage sees only its own gradients: the step is applied only if every stage's are finite.
  Tensor bad = Tensor::from_vector(
      std::vector<float>{std::isfinite(stats.loss) && optim::gradients_finite(params_) ? 0.0f : 1.0f}, {1});
  dist::world()->all_reduce(bad, dist::ReduceOp::max)->wait();
  const bool finite = bad.item() == 0.0f;
  if (hooks.control.after_backward(finite, static_cast<float>(stats.loss), at.epoch, at.step, at.steps) ==
      StepAction::stop)
    return StepAction::stop;
  optimizer_.step(lr);
  hooks.losses.add(stats.loss);
  hooks.profiler.lap(profile::Phase::optimizer);
  return StepAction::apply;
}

double PipelineStep::take_bubble() {
  Tensor times = Tensor::from_vector(
      std::vector<float>{static_cast<float>(idle_ms_), static_cast<float>(step_ms_)}, {2});
  dist::world()->all_reduce(times, dist::ReduceOp::sum)->wait();
  idle_ms_ = step_ms_ = 0;
  const float* t = times.data<float>();
  return t[1] > 0 ? t[0] / t[1] : 0.0;
}

double PipelineStep::bubble_theory() const {
  return dist::pipeline_bubble_theory(pipeline_.stage().count(), pipeline_.options().micro_batches);
}

}  // namespace dpt::train
