// Sequential: children applied in order. A ReLU right after a layer that can fuse it
// (Conv2d, Linear, BatchNorm2d) runs inside that layer's kernel instead of as its own pass.
#pragma once

#include <vector>

#include "nn/module.h"
#include "nn/pipeline_stage.h"

namespace dpt::nn {

class Sequential : public Module, public Splittable {
 public:
  Sequential() = default;
  // Children are named "0", "1", ... as in PyTorch.
  Sequential& add(ModulePtr module);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  size_t size() const { return layers_.size(); }
  const std::vector<ModulePtr>& layers() const { return layers_; }
  // A unit per layer with parameters, with the parameter-free layers after it (its ReLU,
  // Dropout, pooling); those before the first such layer (Flatten) join the first unit. So
  // no cut falls between a layer and the ReLU fused into it. Named by the children's
  // names: "0-2", "3-4", "5".
  std::vector<StageUnit> stage_units() override;

 private:
  std::vector<ModulePtr> layers_;
};

}  // namespace dpt::nn
