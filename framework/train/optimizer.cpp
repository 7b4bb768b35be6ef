#include "train/optimizer.h"

#include "parallel/zero.h"
#include "optim/adamw.h"
#include "optim/sgd.h"

namespace dpt::train {

std::unique_ptr<optim::Optimizer> make_optimizer(const io::OptimizerConfig& c, nn::Module& model) {
  auto rule = [&c](std::vector<optim::ParamGroup> groups) -> std::unique_ptr<optim::Optimizer> {
    if (c.name == io::OptimizerName::adamw)
      return std::make_unique<optim::AdamW>(
          std::move(groups), optim::AdamWOptions{static_cast<float>(c.betas[0]),
                                                 static_cast<float>(c.betas[1]), static_cast<float>(c.eps)});
    return std::make_unique<optim::Sgd>(std::move(groups),
                                        optim::SgdOptions{static_cast<float>(c.momentum), c.nesterov});
  };
  auto groups = optim::param_groups(model, static_cast<float>(c.weight_decay), c.no_decay_bias_bn);
  auto* ddp = dynamic_cast<dist::DistributedDataParallel*>(&model);
  if (c.shard && ddp) {
    auto zero = std::make_unique<dist::ZeroOptimizer>(*ddp, std::move(groups), rule);
    zero->gather_during_forward();  // where a layer cannot wait for its bucket, step() waits
    return zero;
  }
  return rule(std::move(groups));
}

optim::LrSchedule make_schedule(const io::Config& config, int64_t steps_per_epoch, int world_size) {
  const io::ScheduleConfig& c = config.schedule;
  optim::ScheduleOptions options;
  options.kind = c.name;
  options.warmup_epochs = static_cast<double>(c.warmup_epochs);
  options.milestones = c.milestones;
  options.gamma = static_cast<float>(c.gamma);
  options.min_lr = static_cast<float>(c.min_lr);
  const float lr =
      static_cast<float>(config.optimizer.lr) * (config.lr_scaling == io::LrScaling::linear ? world_size : 1);
  return optim::LrSchedule(lr, options, steps_per_epoch, config.epochs);
}

}  // namespace dpt::train
