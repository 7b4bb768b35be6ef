// SGD with momentum, Nesterov and L2 weight decay, with PyTorch's update rule:
//   g = grad + wd * p;  v = momentum * v + g;  p -= lr * (nesterov ? g + momentum * v : v)
#pragma once

#include "optim/optimizer.h"

namespace dpt::optim {

struct SgdOptions {
  float momentum = 0.0f;
  bool nesterov = false;
};

class Sgd : public Optimizer {
 public:
  Sgd(std::vector<ParamGroup> groups, SgdOptions options);
  void step(float lr) override;
  void step_prepare(float lr) override;
  void step_apply() override;
  // Momentum buffers, one per parameter in group order (for checkpoints).
  const std::vector<Tensor>& momentum_buffers() const { return state_[0]; }
  std::vector<std::string> state_kinds() const override;  // "momentum" when momentum > 0

 private:
  // scalars: null for step(lr), step_prepare's learning rate for step_apply().
  void update(float lr, const DeviceScalars* scalars);

  SgdOptions options_;
};

}  // namespace dpt::optim
