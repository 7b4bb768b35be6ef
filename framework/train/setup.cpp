#include "train/setup.h"

#include <algorithm>

#include "comm/dist.h"
#include "datasets/cifar10.h"
#include "datasets/mnist.h"
#include "datasets/synthetic.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "parallel/tensor_parallel.h"
#include "parallel/zero.h"

namespace dpt::train {

TrainData load_data(const io::DatasetConfig& c, uint64_t seed) {
  using io::DatasetName;
  TrainData sets;
  if (c.name == DatasetName::fashion_mnist)
    sets = {data::load_fashion_mnist(c.path, true), data::load_fashion_mnist(c.path, false)};
  else if (c.name == DatasetName::mnist)
    sets = {data::load_mnist(c.path, true), data::load_mnist(c.path, false)};
  else if (c.name == DatasetName::cifar10)
    sets = {data::load_cifar10(c.path, true), data::load_cifar10(c.path, false)};
  else
    sets = {data::make_synthetic(c.shape[0], c.shape[1], c.shape[2], c.classes, c.size, seed),
            data::make_synthetic(c.shape[0], c.shape[1], c.shape[2], c.classes,
                                 std::max<int64_t>(c.size / 6, 1), seed + 1)};
  data::dataset_check_split(sets.train, sets.test,
                            io::name_of(c.name) + (c.path.empty() ? "" : " in " + c.path));
  return sets;
}

nn::Compute compute_for(const io::Config& config, Device device) {
  const bool bf16 = config.precision == io::Precision::bf16;
  nn::Compute compute{bf16 ? DType::bf16 : DType::f32, config.channels_last};
  DPT_CHECK(!compute.active() || device.is_cuda())
      << (bf16 ? "precision: bf16" : "channels_last: true") << " needs a CUDA device, but this run trains on "
      << device.str()
      << " (the CPU kernels are f32 and choose their own layout): set precision: fp32 and channels_last: "
         "false";
  return compute;
}

models::ModelSpec model_spec(const data::Dataset& train, uint64_t seed, dist::GroupPtr tp_group) {
  return {train.channels, train.height, train.width, train.classes, seed, std::move(tp_group)};
}

nn::NamedTensors model_whole_state(const io::Config& config, const models::ModelSpec& spec, nn::Module& net,
                                   const dist::GroupPtr& tp_group) {
  if (!tp_group || tp_group->size() == 1) return net.state_dict();
  // The unsplit model, for its tensors' shapes.
  YAML::Node node = YAML::Clone(config.model.node);
  node["tensor_parallel"] = false;
  models::ModelSpec whole = spec;
  whole.tp_group = nullptr;
  return nn::gather_whole_state(net.state_dict(), models::build_model(node, whole)->state_dict(), *tp_group);
}

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
