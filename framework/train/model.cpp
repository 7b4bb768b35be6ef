#include "train/model.h"

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
