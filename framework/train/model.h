// The model a run trains: built by name from the registry for the data's shape, set to
// the config's compute mode, placed on the rank's device and, on several ranks, wrapped in
// DistributedDataParallel. How the model is split over ranks is decided here and nowhere
// else in the Trainer.
#pragma once

#include "datasets/dataset.h"
#include "io/config.h"
#include "models/registry.h"
#include "nn/compute.h"
#include "nn/module.h"

namespace dpt::train {

// The `precision` and `channels_last` keys as nn::Compute for a model that trains on
// `device`. Throws dpt::Error when they ask for what only CUDA does (bf16, channels-last)
// and `device` is not a CUDA device.
nn::Compute compute_for(const io::Config& config, Device device);

// What the training data says about the model's input and output; `seed` initialises it.
models::ModelSpec model_spec(const data::Dataset& train, uint64_t seed);

// The bare model (what checkpoints hold) of `config.model` for `spec`, computing as
// `compute`, on the CPU. Throws dpt::Error for an unknown model or model key.
nn::ModulePtr model_build(const io::Config& config, const models::ModelSpec& spec, nn::Compute compute);

// Throws dpt::Error when `distributed.backend` names the backend that does not carry
// `device`'s tensors (nccl for a CPU run, mpi for a CUDA one).
void backend_check(Device device, const io::DistributedConfig& config);

// Moves `net` to `device` and, when the world has several ranks, wraps it in DDP over the
// world (which broadcasts rank 0's parameters and buffers). Returns what a step calls:
// the wrapper, or `net` itself on one rank. Collective over the world.
nn::ModulePtr model_distribute(const nn::ModulePtr& net, Device device, const io::DistributedConfig& config);

}  // namespace dpt::train
