#include "train/step.h"

#include "comm/dist.h"
#include "ops/loss.h"
#include "optim/graphed_train_step.h"

namespace dpt::train {
namespace {

using StepAction = io::RunControl::StepAction;

class EagerStep : public Step {
 public:
  EagerStep(nn::Module& model, nn::Module& net, optim::Optimizer& optimizer, optim::Ema* ema,
            float label_smoothing)
      : model_(model), net_(net), optimizer_(optimizer), ema_(ema), label_smoothing_(label_smoothing) {}

  StepAction run(const data::Batch& batch, float lr, StepAt at, StepHooks hooks) override {
    Tensor loss =
        hooks.control.loss_hook(cross_entropy(model_(batch.images), batch.labels, label_smoothing_));
    hooks.profiler.lap(profile::Phase::forward);
    optimizer_.zero_grad();
    loss.backward();
    hooks.profiler.lap(profile::Phase::backward);
    const StepAction action = hooks.control.after_backward(loss, at.epoch, at.step, at.steps);
    if (action == StepAction::stop) return action;
    if (action == StepAction::apply) {
      optimizer_.step(lr);
      if (ema_) {
        optimizer_.parameters_ready();
        ema_->update(net_);
      }
      hooks.losses.add(loss);
    }
    hooks.profiler.lap(profile::Phase::optimizer);
    return action;
  }

 private:
  nn::Module& model_;
  nn::Module& net_;
  optim::Optimizer& optimizer_;
  optim::Ema* ema_;
  float label_smoothing_;
};

// Forward, backward and update in one replay, timed as forward. A graph cannot branch on
// the verdict, so its update is made whatever it is: the config refuses cuda_graphs with
// on_nonfinite: skip, and a non-finite step stops the run.
class CudaGraphStep : public Step {
 public:
  explicit CudaGraphStep(std::unique_ptr<optim::GraphedTrainStep> graphed) : graphed_(std::move(graphed)) {}

  StepAction run(const data::Batch& batch, float lr, StepAt at, StepHooks hooks) override {
    optim::GraphedStepResult r = graphed_->run(batch.images, batch.labels, lr);
    hooks.profiler.lap(profile::Phase::forward);
    if (hooks.control.after_backward(r.finite, r.loss, at.epoch, at.step, at.steps) == StepAction::stop)
      return StepAction::stop;
    hooks.losses.add(r.loss);
    hooks.profiler.lap(profile::Phase::optimizer);  // ends the step's record
    return StepAction::apply;
  }

 private:
  std::unique_ptr<optim::GraphedTrainStep> graphed_;
};

}  // namespace

std::unique_ptr<Step> make_step(const io::Config& config, nn::Module& model, nn::Module& net,
                                optim::Optimizer& optimizer, optim::Ema* ema, const data::Dataset& train) {
  const float label_smoothing = static_cast<float>(config.label_smoothing);
  if (!config.cuda_graphs) return std::make_unique<EagerStep>(model, net, optimizer, ema, label_smoothing);
  const Device device = net.parameters().front().device();
  DPT_CHECK(device.is_cuda()) << "cuda_graphs: true needs training on a CUDA device, but rank "
                              << dist::info().rank << " trains on " << device.str();
  return std::make_unique<CudaGraphStep>(std::make_unique<optim::GraphedTrainStep>(
      model, net, optimizer, ema, Shape{config.batch_size, train.channels, train.height, train.width},
      optim::GraphedTrainOptions{.label_smoothing = label_smoothing,
                                 .classes = train.classes,
                                 .check_loss = dist::info().world_size == 1}));
}

}  // namespace dpt::train
