// The residual blocks of He et al. 2016 ("Deep Residual Learning", arXiv 1512.03385) and
// its pre-activation form (He et al. 2016b, "Identity Mappings", arXiv 1603.05027), and the
// ResNet trunk that stacks them; models/resnet_cifar.cpp and models/resnet18.cpp choose
// the widths and depths.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "models/registry.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "nn/pipeline_stage.h"
#include "nn/sequential.h"

namespace dpt::models {

// The shortcut where a block changes the shape (stride 2 and/or more channels); where it
// does not, the shortcut is always the identity.
enum class ShortcutKind {
  pad,         // option A: subsample and pad with zero channels (ops/shortcut_pad.h), no parameters
  projection,  // option B: 1x1 conv with the block's stride, then BN
};

struct BlockOptions {
  ShortcutKind shortcut = ShortcutKind::pad;
  // Start each residual branch at zero (its last BN's weight = 0; Goyal et al. 2017), so
  // every block passes its (non-negative) input through at initialisation. Post-activation
  // blocks only.
  bool zero_init_residual = false;
};

// A 3x3 convolution with padding 1 and no bias (a BN follows), Kaiming-normal with
// fan_out = out * 3 * 3 as in fb.resnet.torch and torchvision. Also used for the stem.
std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride, Rng& rng);

// With a tensor-parallel group `tp` (null: none), a block's two convolutions are a
// column/row-parallel pair (nn/tensor_parallel.h): conv1's output channels, and the BN and
// ReLU on them, are split over tp's ranks; conv2 sums the ranks' parts back into all `out`
// channels, so the block's input and output are whole. The weights are the slices of those
// the unsplit block would draw from `rng`.

// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); conv1 carries the stride.
// Children: conv1, bn1, conv2, bn2, shortcut (when the shape changes).
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride, const BlockOptions& options, Rng& rng,
             const dist::GroupPtr& tp = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return description_; }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  nn::ModulePtr shortcut_;  // null: identity
  std::string description_;
};

// a = relu(bn1(x)); conv2(relu(bn2(conv1(a)))) + shortcut, no activation after the sum.
// The shortcut reads `a` in the first block of a stage (where it is a pad or projection,
// and in the network's first block, per the paper's appendix) and x everywhere else.
// Children: bn1, conv1, bn2, conv2, shortcut (when the shape changes).
class PreActBlock : public nn::Module {
 public:
  PreActBlock(int64_t in, int64_t out, int64_t stride, bool first_in_stage, const BlockOptions& options,
              Rng& rng, const dist::GroupPtr& tp = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return description_; }

 private:
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  nn::ModulePtr shortcut_;  // null: identity
  bool shortcut_reads_activation_;
  std::string description_;
};

struct ResNetOptions {
  int64_t stem_width = 16;      // channels of the 3x3 stem conv (stride 1, no max-pool)
  std::vector<int64_t> widths;  // per stage; stride 1 into the first, 2 into the others
  int64_t blocks_per_stage = 3;
  bool preact = false;  // PreActBlock, BN-ReLU before pooling, no BN in the stem
  BlockOptions block;
  dist::GroupPtr tp_group;  // set: the last (widest) stage's blocks are tensor-parallel
};

// conv3x3 stem [+ BN-ReLU], stages "layer1".."layerK" of blocks, [BN-ReLU for preact],
// global average pooling, linear classifier ("fc", PyTorch's default initialisation).
// Parameter names follow kuangliu/pytorch-cifar: conv1.weight, layer2.0.conv1.weight,
// layer2.0.shortcut.0.weight (torchvision's "downsample"), fc.bias.
class ResNet : public nn::Module, public nn::Splittable {
 public:
  ResNet(const ResNetOptions& options, int64_t in_channels, int64_t num_classes, Rng& rng);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return description_; }
  // A unit per block ("layer2.0"), the stem joining the first and the head (final BN,
  // pooling, fc) the last: the blocks cost about the same (each stage halves the map and
  // doubles the channels), so stages of equal block counts are balanced, and 3 stages of a
  // CIFAR ResNet are its 3 stages.
  std::vector<nn::StageUnit> stage_units() override;

 private:
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;  // null for preact
  std::vector<std::shared_ptr<nn::Sequential>> stages_;
  std::shared_ptr<nn::BatchNorm2d> bn_final_;  // preact only
  std::shared_ptr<nn::Linear> fc_;
  std::string description_;
};

// Reads the YAML keys every ResNet shares: shortcut (A or B), preact, zero_init_residual,
// tensor_parallel (the last stage split over spec.tp_group). `default_shortcut` is 'A' or
// 'B'. Throws Error for any other shortcut letter, for zero_init_residual with preact, and
// for tensor_parallel without a group or with one whose size does not divide the last
// stage's width.
void read_resnet_keys(ModelArgs& args, const ModelSpec& spec, char default_shortcut, ResNetOptions& options);

}  // namespace dpt::models
