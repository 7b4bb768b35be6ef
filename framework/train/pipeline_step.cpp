#include "train/pipeline_step.h"

#include <cmath>

#include "comm/dist.h"
#include "nn/pipeline_stage.h"
#include "ops/loss.h"
#include "optim/nonfinite.h"
#include "train/model.h"

namespace dpt::train {

std::string pipeline_describe(const io::Config& config, nn::Module& net, const ParallelLayout& layout) {
  const int64_t m = config.pipeline.micro_batches;
  std::string out = "pipeline: " + std::to_string(layout.pp) + " stages x " + std::to_string(layout.dp) +
                    " data-parallel replicas; rank r holds stage r / " + std::to_string(layout.dp) +
                    " of replica r % " + std::to_string(layout.dp) + "; " +
                    dist::pipeline_schedule_name(config.pipeline.schedule) + ", " + std::to_string(m) +
                    " micro-batches of " + std::to_string(config.batch_size / m) + " per step\n";
  for (int s = 0; s < layout.pp; ++s) {
    std::string ranks;
    for (int d = 0; d < layout.dp; ++d) ranks += (d ? ", " : "") + std::to_string(s * layout.dp + d);
    const std::string stage = nn::split_stage(net, layout.pp, s)->describe();
    out += "  stage " + std::to_string(s) + " on rank" + (layout.dp > 1 ? "s " : " ") + ranks + ": " +
           stage.substr(stage.find(": ") + 2, stage.size() - stage.find(": ") - 3) + "\n";
  }
  return out;
}

nn::ModulePtr pipeline_distribute(nn::Module& net, Device device, const io::Config& config,
                                  const ParallelLayout& layout) {
  backend_check(device, config.distributed.backend);
  net.to(device);  // the whole model: evaluation runs it after pipeline_gather_model
  // DDP as for a whole model: what a stage cannot do (sync_bn, compress, optimizer.shard)
  // is refused with pp > 1 (config_rules).
  return data_parallel(nn::split_stage(net, layout.pp, layout.stage), layout.dp_group, config);
}

void pipeline_gather_model(nn::Module& net, const ParallelLayout& layout) {
  std::vector<dist::WorkPtr> pending;
  for (int s = 0; s < layout.pp; ++s)
    for (const auto& [name, tensor] : nn::split_stage(net, layout.pp, s)->state_dict())
      pending.push_back(layout.pp_group->broadcast(tensor, s));
  for (const dist::WorkPtr& work : pending) work->wait();
}

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
