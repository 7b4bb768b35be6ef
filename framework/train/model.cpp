#include "train/model.h"

#include "parallel/ddp.h"
#include "comm/dist.h"
#include "parallel/tensor_parallel.h"

namespace dpt::train {

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

void backend_check(Device device, io::CommBackend backend) {
  // A group carries each tensor where it lives (MPI for host memory, NCCL for device memory):
  // `backend` states which of the two the user expects, and is refused where the other one is.
  const bool cuda = device.is_cuda();
  DPT_CHECK(backend != io::CommBackend::nccl || cuda)
      << "distributed.backend: nccl carries CUDA tensors, but this run trains on " << device.str()
      << ": set device: cuda, or distributed.backend: auto or mpi";
  DPT_CHECK(backend != io::CommBackend::mpi || !cuda)
      << "distributed.backend: mpi carries host tensors, but this run trains on " << device.str()
      << " (dpt moves CUDA tensors through NCCL): set distributed.backend: auto or nccl, or device: cpu";
}

nn::ModulePtr data_parallel(nn::ModulePtr module, dist::GroupPtr group, const io::Config& config) {
  if (group->size() == 1) return module;
  // The config holds DDP's keys as DDP takes them; shard_gradients, which is no key, follows
  // the optimizer: a sharded one needs the gradients reduce-scattered.
  dist::DdpOptions options = config.distributed.ddp;
  options.shard_gradients = config.optimizer.shard;
  return std::make_shared<dist::DistributedDataParallel>(std::move(module), std::move(group), options);
}

nn::ModulePtr model_distribute(const nn::ModulePtr& net, Device device, const io::Config& config,
                               dist::GroupPtr dp_group) {
  backend_check(device, config.distributed.backend);
  net->to(device);
  return data_parallel(net, dp_group ? std::move(dp_group) : dist::world(), config);
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

}  // namespace dpt::train
