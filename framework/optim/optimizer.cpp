#include "optim/optimizer.h"

namespace dpt::optim {

std::vector<ParamGroup> param_groups(const nn::Module& model, float weight_decay, bool no_decay_1d) {
  ParamGroup decay{{}, weight_decay}, no_decay{{}, no_decay_1d ? 0.0f : weight_decay};
  for (auto& [name, p] : model.named_parameters()) (p.dim() > 1 ? decay : no_decay).params.push_back(p);
  return {decay, no_decay};
}

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {}

void Optimizer::zero_grad() {
  for (auto& group : groups_)
    for (auto& p : group.params)
      if (p.grad().defined()) p.grad().zero_();
}

}  // namespace dpt::optim
