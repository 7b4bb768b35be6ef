// What a run's config asks for, built: the training and test sets (loaded and checked to
// fit one model, so that a bad path shows before anything is built), the model's compute
// mode, spec and whole state, the optimizer and the learning-rate schedule: the one place
// where the `dataset:`, `model:`, `optimizer:` and `schedule:` keys become objects. How the
// model is placed on the ranks and wrapped in DDP is the parallel plan's (parallel_plan.h).
#pragma once

#include <cstdint>
#include <memory>

#include "datasets/dataset.h"
#include "io/config.h"
#include "models/registry.h"
#include "nn/compute.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace dpt::train {

struct TrainData {
  data::Dataset train, test;
};

// MNIST, Fashion-MNIST or CIFAR-10 from `config.path`, or synthetic data from `seed` (a
// held-out set one sixth the size of the training set, as MNIST's 10k/60k). Throws
// dpt::Error naming the dataset and the path for missing or malformed files, and when the
// test set differs from the training set in channels, image size or classes.
TrainData load_data(const io::DatasetConfig& config, uint64_t seed);

// The `precision` and `channels_last` keys as nn::Compute for a model that trains on
// `device`. Throws dpt::Error when they ask for what only CUDA does (bf16, channels-last)
// and `device` is not a CUDA device.
nn::Compute compute_for(const io::Config& config, Device device);

// What the training data says about the model's input and output; `seed` initialises it;
// a model with `tensor_parallel: true` splits its layers over `tp_group`.
models::ModelSpec model_spec(const data::Dataset& train, uint64_t seed, dist::GroupPtr tp_group = nullptr);

// The model's state with every tensor a tensor-parallel model splits gathered whole
// (nn::gather_whole_state): what model.safetensors holds, loadable into the one-process
// model. `net` itself's state when tp_group is null or of one rank. Collective over tp_group.
nn::NamedTensors model_whole_state(const io::Config& config, const models::ModelSpec& spec, nn::Module& net,
                                   const dist::GroupPtr& tp_group);

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
