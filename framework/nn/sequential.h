// Sequential: children applied in order. A ReLU right after a layer that can fuse it
// (Conv2d, Linear, BatchNorm2d) runs inside that layer's kernel instead of as its own pass.
#pragma once

#include "nn/module.h"

namespace dpt::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  // Children are named "0", "1", ... as in PyTorch.
  Sequential& add(ModulePtr module);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  size_t size() const { return layers_.size(); }

 private:
  std::vector<ModulePtr> layers_;
};

}  // namespace dpt::nn
