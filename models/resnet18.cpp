// ResNet-18 adapted to 32x32 inputs (kuangliu/pytorch-cifar): a 3x3 conv-64 stem with
// stride 1 and no max-pool, four stages of two basic blocks at 64, 128, 256 and 512
// channels (maps 32, 16, 8, 4), 1x1 conv + BN projections where the shape changes.
// 11,173,962 parameters for 10 classes.
//   model: {name: resnet18, shortcut: B, preact: false, zero_init_residual: false,
//           tensor_parallel: false}   (true: the 512-channel stage split over tp; blocks.h)
#include "models/blocks.h"
#include "models/registry.h"

namespace dpt::models {
namespace {

nn::ModulePtr build_resnet18(ModelArgs& args, const ModelSpec& spec) {
  ResNetOptions options;
  options.stem_width = 64;
  options.widths = {64, 128, 256, 512};
  options.blocks_per_stage = 2;
  read_resnet_keys(args, spec, 'B', options);
  Rng rng(spec.seed);
  return std::make_shared<ResNet>(options, spec.in_channels, spec.num_classes, rng);
}

}  // namespace

DPT_REGISTER_MODEL(resnet18, build_resnet18);

}  // namespace dpt::models
