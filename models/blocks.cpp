// Blocks and trunk of the ResNets. Where a BN is followed by a ReLU it runs as one fused
// kernel (BatchNorm2d::forward_relu), and the residual sum with its ReLU as another (add_relu).
#include "models/blocks.h"

#include <cmath>

#include "nn/sequential.h"
#include "parallel/tensor_parallel.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/pool.h"
#include "ops/shortcut_pad.h"

namespace dpt::models {
namespace {

// Option A as a Module, so it sits in the block's children like option B's projection.
class PadShortcut : public nn::Module {
 public:
  PadShortcut(int64_t out, int64_t stride) : out_(out), stride_(stride) {}
  Tensor forward(const Tensor& x) override { return shortcut_pad(x, out_, stride_); }
  std::string describe() const override {
    return "PadShortcut(" + std::to_string(out_) + ", stride " + std::to_string(stride_) + ")";
  }

 private:
  int64_t out_, stride_;
};

// Kaiming normal with fan_out = out * k * k, no bias. nn::Conv2d draws fan_in weights
// first; they are overwritten, which costs one extra draw at construction only.
std::shared_ptr<nn::Conv2d> conv_fan_out(int64_t in, int64_t out, int64_t kernel, int64_t stride, Rng& rng) {
  auto conv = std::make_shared<nn::Conv2d>(in, out, kernel, rng,
                                           Conv2dOptions{.stride = stride, .padding = kernel / 2}, false);
  rng.fill_normal(conv->weight(), 0.0f, static_cast<float>(std::sqrt(2.0 / (out * kernel * kernel))));
  return conv;
}

nn::ModulePtr make_shortcut(int64_t in, int64_t out, int64_t stride, ShortcutKind kind, Rng& rng) {
  if (in == out && stride == 1) return nullptr;
  if (kind == ShortcutKind::pad) return std::make_shared<PadShortcut>(out, stride);
  auto projection = std::make_shared<nn::Sequential>();
  projection->add(conv_fan_out(in, out, 1, stride, rng)).add(std::make_shared<nn::BatchNorm2d>(out));
  return projection;
}

// A block's conv1 (in -> out, with the stride) and conv2 (out -> out), drawn in that order;
// with `tp`, as a column/row-parallel pair. `mid` is the channel count between them here.
struct ConvPair {
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  int64_t mid;
};

ConvPair conv_pair(int64_t in, int64_t out, int64_t stride, Rng& rng, const dist::GroupPtr& tp) {
  auto conv1 = conv3x3(in, out, stride, rng);
  auto conv2 = conv3x3(out, out, 1, rng);
  if (!tp) return {conv1, conv2, out};
  return {std::make_shared<nn::ColumnParallelConv2d>(*conv1, tp),
          std::make_shared<nn::RowParallelConv2d>(*conv2, tp), out / tp->size()};
}

std::string block_str(const char* name, int64_t in, int64_t out, int64_t stride,
                      const nn::ModulePtr& shortcut) {
  return std::string(name) + "(" + std::to_string(in) + ", " + std::to_string(out) + ", stride " +
         std::to_string(stride) + (shortcut ? ", " + shortcut->describe() : "") + ")";
}

}  // namespace

std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride, Rng& rng) {
  return conv_fan_out(in, out, 3, stride, rng);
}

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t stride, const BlockOptions& options, Rng& rng,
                       const dist::GroupPtr& tp) {
  ConvPair convs = conv_pair(in, out, stride, rng, tp);
  conv1_ = register_module("conv1", convs.conv1);
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(convs.mid));
  conv2_ = register_module("conv2", convs.conv2);
  bn2_ = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
  shortcut_ = make_shortcut(in, out, stride, options.shortcut, rng);
  if (shortcut_) register_module("shortcut", shortcut_);
  if (options.zero_init_residual) bn2_->named_parameters().at(0).second.fill_(0.0f);  // "weight"
  description_ = block_str("BasicBlock", in, out, stride, shortcut_);
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor h = bn2_->forward(conv2_->forward(bn1_->forward_relu(conv1_->forward(x))));
  return add_relu(h, shortcut_ ? shortcut_->forward(x) : x);
}

PreActBlock::PreActBlock(int64_t in, int64_t out, int64_t stride, bool first_in_stage,
                         const BlockOptions& options, Rng& rng, const dist::GroupPtr& tp)
    : shortcut_reads_activation_(first_in_stage) {
  DPT_CHECK(!options.zero_init_residual) << "PreActBlock: zero_init_residual needs a post-activation block "
                                            "(this branch ends in a conv, not a BN)";
  ConvPair convs = conv_pair(in, out, stride, rng, tp);
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(in));
  conv1_ = register_module("conv1", convs.conv1);
  bn2_ = register_module("bn2", std::make_shared<nn::BatchNorm2d>(convs.mid));
  conv2_ = register_module("conv2", convs.conv2);
  shortcut_ = make_shortcut(in, out, stride, options.shortcut, rng);
  if (shortcut_) register_module("shortcut", shortcut_);
  description_ = block_str("PreActBlock", in, out, stride, shortcut_);
}

Tensor PreActBlock::forward(const Tensor& x) {
  Tensor a = bn1_->forward_relu(x);
  Tensor h = conv2_->forward(bn2_->forward_relu(conv1_->forward(a)));
  const Tensor& s = shortcut_reads_activation_ ? a : x;
  return add(h, shortcut_ ? shortcut_->forward(s) : s);
}

std::vector<nn::StageUnit> ResNet::stage_units() {
  std::vector<nn::StageUnit> units;
  for (size_t s = 0; s < stages_.size(); ++s) {
    const auto& blocks = stages_[s]->layers();
    for (size_t b = 0; b < blocks.size(); ++b) {
      std::string name = "layer" + std::to_string(s + 1) + "." + std::to_string(b);
      nn::ModulePtr block = blocks[b];
      units.push_back({name, {{name, block}}, [block](const Tensor& x) { return block->forward(x); }});
    }
  }
  // The stem before the first block, as in forward().
  nn::StageUnit& first = units.front();
  first.name = "conv1.." + first.name;
  first.modules.insert(first.modules.begin(), {"conv1", conv1_});
  if (bn1_) first.modules.insert(first.modules.begin() + 1, {"bn1", bn1_});
  first.forward = [conv1 = conv1_, bn1 = bn1_, block = first.forward](const Tensor& x) {
    Tensor h = conv1->forward(x);
    if (bn1) h = bn1->forward_relu(h);
    return block(h);
  };
  // The head after the last block.
  nn::StageUnit& last = units.back();
  last.name += "..fc";
  if (bn_final_) last.modules.emplace_back("bn_final", bn_final_);
  last.modules.emplace_back("fc", fc_);
  last.forward = [block = last.forward, bn_final = bn_final_, fc = fc_](const Tensor& x) {
    Tensor h = block(x);
    if (bn_final) h = bn_final->forward_relu(h);
    return fc->forward(global_avg_pool2d(h));
  };
  return units;
}

ResNet::ResNet(const ResNetOptions& options, int64_t in_channels, int64_t num_classes, Rng& rng) {
  DPT_CHECK(!options.widths.empty() && options.blocks_per_stage >= 1)
      << "ResNet: needs at least one stage of at least one block";
  conv1_ = register_module("conv1", conv3x3(in_channels, options.stem_width, 1, rng));
  if (!options.preact) bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(options.stem_width));
  int64_t in = options.stem_width;
  for (size_t s = 0; s < options.widths.size(); ++s) {
    auto stage = std::make_shared<nn::Sequential>();
    for (int64_t b = 0; b < options.blocks_per_stage; ++b) {
      int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      int64_t out = options.widths[s];
      dist::GroupPtr tp = s + 1 == options.widths.size() ? options.tp_group : nullptr;
      if (options.preact) {
        stage->add(std::make_shared<PreActBlock>(in, out, stride, b == 0, options.block, rng, tp));
      } else {
        stage->add(std::make_shared<BasicBlock>(in, out, stride, options.block, rng, tp));
      }
      in = out;
    }
    stages_.push_back(register_module("layer" + std::to_string(s + 1), stage));
  }
  if (options.preact) bn_final_ = register_module("bn_final", std::make_shared<nn::BatchNorm2d>(in));
  fc_ = register_module("fc", std::make_shared<nn::Linear>(in, num_classes, rng));

  std::string widths;
  for (int64_t w : options.widths) widths += (widths.empty() ? "" : ", ") + std::to_string(w);
  description_ =
      std::string(options.preact ? "PreActResNet" : "ResNet") + "(stem " +
      std::to_string(options.stem_width) + ", widths [" + widths + "], " +
      std::to_string(options.blocks_per_stage) + " blocks per stage, shortcut " +
      (options.block.shortcut == ShortcutKind::pad ? "A" : "B") +
      (options.tp_group ? ", last stage over tp " + std::to_string(options.tp_group->size()) : "") + ")";
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = conv1_->forward(x);
  if (bn1_) h = bn1_->forward_relu(h);
  for (auto& stage : stages_) h = stage->forward(h);
  if (bn_final_) h = bn_final_->forward_relu(h);
  return fc_->forward(global_avg_pool2d(h));
}

void read_resnet_keys(ModelArgs& args, const ModelSpec& spec, char default_shortcut, ResNetOptions& options) {
  std::string shortcut = args.get<std::string>("shortcut", std::string(1, default_shortcut));
  DPT_CHECK(shortcut == "A" || shortcut == "B")
      << "model.shortcut: expected A (subsample + zero channels, no parameters) or B (1x1 conv + BN "
         "projection), got '"
      << shortcut << "'";
  options.block.shortcut = shortcut == "A" ? ShortcutKind::pad : ShortcutKind::projection;
  options.preact = args.get<bool>("preact", false);
  options.block.zero_init_residual = args.get<bool>("zero_init_residual", false);
  DPT_CHECK(!(options.preact && options.block.zero_init_residual))
      << "model.zero_init_residual: needs preact: false (a pre-activation branch ends in a conv, not a BN)";
  options.tp_group = tensor_parallel_group(args, spec);
  if (options.tp_group) {
    int64_t width = options.widths.back();
    DPT_CHECK(width % options.tp_group->size() == 0)
        << "model.tensor_parallel: the last stage's " << width << " channels do not split evenly over the "
        << options.tp_group->size() << " ranks of the tensor-parallel group";
  }
}

}  // namespace dpt::models
