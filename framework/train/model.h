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

// What the training data says about the model's input and output; `seed` initialises it;
// a model with `tensor_parallel: true` splits its layers over `tp_group`.
models::ModelSpec model_spec(const data::Dataset& train, uint64_t seed, dist::GroupPtr tp_group = nullptr);

// Throws dpt::Error when `backend` (the `distributed.backend` key) is the one that does not
// carry `device`'s tensors (nccl for a CPU run, mpi for a CUDA one).
void backend_check(Device device, io::CommBackend backend);

// `module` wrapped in DDP over `group` as the config's `distributed` keys ask (DDP
// broadcasts its rank 0's parameters and buffers), reduce-scattering the gradients for a
// sharded optimizer (optimizer.shard); `module` itself when the group has one rank. The one
// place a run builds DDP, for the whole model and for a pipeline stage alike, so the DDP
// keys go from the config to DDP here and nowhere else. Collective over group.
nn::ModulePtr data_parallel(nn::ModulePtr module, dist::GroupPtr group, const io::Config& config);

// Moves `net` to `device` and, when `dp_group` has several ranks, wraps it in DDP over
// that group (data_parallel). Returns what a step calls: the wrapper, or `net` itself.
// Collective over dp_group; null: the world.
nn::ModulePtr model_distribute(const nn::ModulePtr& net, Device device, const io::Config& config,
                               dist::GroupPtr dp_group = nullptr);

// The model's state with every tensor a tensor-parallel model splits gathered whole
// (nn::gather_whole_state): what model.safetensors holds, loadable into the one-process
// model. `net` itself's state when tp_group is null or of one rank. Collective over tp_group.
nn::NamedTensors model_whole_state(const io::Config& config, const models::ModelSpec& spec, nn::Module& net,
                                   const dist::GroupPtr& tp_group);

}  // namespace dpt::train
