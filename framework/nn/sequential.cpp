#include "nn/sequential.h"

#include "nn/layers.h"

namespace dpt::nn {

Sequential& Sequential::add(ModulePtr module) {
  register_module(std::to_string(layers_.size()), module);
  layers_.push_back(std::move(module));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto* fusable = dynamic_cast<ReluFusable*>(layers_[i].get());
    bool relu_next = i + 1 < layers_.size() && dynamic_cast<ReLU*>(layers_[i + 1].get());
    if (fusable && relu_next) {
      h = fusable->forward_relu(h);
      ++i;
    } else {
      h = layers_[i]->forward(h);
    }
  }
  return h;
}

std::string Sequential::describe() const {
  std::string out = "Sequential(\n";
  for (size_t i = 0; i < layers_.size(); ++i) out += "  (" + std::to_string(i) + ") " + layers_[i]->describe() + "\n";
  return out + ")";
}

}  // namespace dpt::nn
