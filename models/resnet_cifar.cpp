// The CIFAR ResNets of He et al. 2016, section 4.2: a 3x3 conv-16 stem, three stages of n
// basic blocks at 16, 32 and 64 channels (maps 32, 16, 8), global average pooling, a
// linear classifier; depth = 6n + 2. Shortcut A (parameter-free) by default, as the paper.
//   model: {name: resnet20, shortcut: A, preact: false, zero_init_residual: false,
//           tensor_parallel: false}   (true: the 64-channel stage split over tp; blocks.h)
//   model: {name: resnet_cifar, depth: 20}        (any depth 6n + 2)
#include "models/blocks.h"
#include "models/registry.h"

namespace dpt::models {
namespace {

nn::ModulePtr build_cifar_resnet(ModelArgs& args, const ModelSpec& spec, int64_t depth) {
  DPT_CHECK(depth >= 8 && (depth - 2) % 6 == 0)
      << "model.depth: a CIFAR ResNet has depth 6n + 2 (20, 32, 44, 56, 110, ...), got " << depth;
  ResNetOptions options;
  options.stem_width = 16;
  options.widths = {16, 32, 64};
  options.blocks_per_stage = (depth - 2) / 6;
  read_resnet_keys(args, spec, 'A', options);
  Rng rng(spec.seed);
  return std::make_shared<ResNet>(options, spec.in_channels, spec.num_classes, rng);
}

template <int64_t Depth>
nn::ModulePtr build_fixed_depth(ModelArgs& args, const ModelSpec& spec) {
  return build_cifar_resnet(args, spec, Depth);
}

nn::ModulePtr build_resnet_cifar(ModelArgs& args, const ModelSpec& spec) {
  return build_cifar_resnet(args, spec, args.get<int64_t>("depth", 20));
}

}  // namespace

DPT_REGISTER_MODEL(resnet20, build_fixed_depth<20>);
DPT_REGISTER_MODEL(resnet32, build_fixed_depth<32>);
DPT_REGISTER_MODEL(resnet44, build_fixed_depth<44>);
DPT_REGISTER_MODEL(resnet56, build_fixed_depth<56>);
DPT_REGISTER_MODEL(resnet110, build_fixed_depth<110>);
DPT_REGISTER_MODEL(resnet_cifar, build_resnet_cifar);

}  // namespace dpt::models
