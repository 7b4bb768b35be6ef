// The optimizer and the learning-rate schedule a config asks for: the one place where the
// `optimizer:` and `schedule:` keys become objects.
#pragma once

#include <cstdint>
#include <memory>

#include "io/config.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace dpt::train {

// SGD or AdamW over `model`'s parameters, in two groups: weights with `weight_decay`, and
// 1-D parameters without it when `no_decay_bias_bn`. With `shard` and `model` a DDP that
// reduce-scatters (data_parallel), the rule runs inside a ZeroOptimizer over DDP's
// group (collective; it moves the parameters into DDP's buckets); on one rank `shard`
// changes nothing. Requires the model where it trains (the optimizer's state is made
// beside the parameters).
std::unique_ptr<optim::Optimizer> make_optimizer(const io::OptimizerConfig& config, nn::Module& model);

// The schedule over `config.epochs` epochs of `steps_per_epoch` steps, from optimizer.lr,
// times `world_size` under `lr_scaling: linear` (the global batch grows with the ranks).
optim::LrSchedule make_schedule(const io::Config& config, int64_t steps_per_epoch, int world_size);

}  // namespace dpt::train
