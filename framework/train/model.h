// The model a run trains: built by name from the registry for the data's shape, set to
// the config's compute mode, and its whole state gathered from tensor-parallel slices. How
// it is placed on the ranks and wrapped in DDP is the parallel plan's (parallel_plan.h).
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

// What the training data says about the model's input and output; `seed` initialises it;
// a model with `tensor_parallel: true` splits its layers over `tp_group`.
models::ModelSpec model_spec(const data::Dataset& train, uint64_t seed, dist::GroupPtr tp_group = nullptr);

// The model's state with every tensor a tensor-parallel model splits gathered whole
// (nn::gather_whole_state): what model.safetensors holds, loadable into the one-process
// model. `net` itself's state when tp_group is null or of one rank. Collective over tp_group.
nn::NamedTensors model_whole_state(const io::Config& config, const models::ModelSpec& spec, nn::Module& net,
                                   const dist::GroupPtr& tp_group);

}  // namespace dpt::train
