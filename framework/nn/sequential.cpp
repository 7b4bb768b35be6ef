#include "nn/sequential.h"

#include "nn/layers.h"

namespace dpt::nn {
namespace {

// `layers` applied in order to x, each ReLU that follows a ReluFusable layer fused into it:
// Sequential's forward, and a unit's.
Tensor forward_layers(const std::vector<ModulePtr>& layers, const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    auto* fusable = dynamic_cast<ReluFusable*>(layers[i].get());
    bool relu_next = i + 1 < layers.size() && dynamic_cast<ReLU*>(layers[i + 1].get());
    if (fusable && relu_next) {
      h = fusable->forward_relu(h);
      ++i;
    } else {
      h = layers[i]->forward(h);
    }
  }
  return h;
}

}  // namespace

Sequential& Sequential::add(ModulePtr module) {
  register_module(std::to_string(layers_.size()), module);
  layers_.push_back(std::move(module));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) { return forward_layers(layers_, x); }

std::vector<StageUnit> Sequential::stage_units() {
  std::vector<size_t> starts = {0};
  bool seen_parameters = false;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i]->named_parameters().empty()) continue;
    if (seen_parameters) starts.push_back(i);
    seen_parameters = true;
  }
  std::vector<StageUnit> units;
  for (size_t u = 0; u < starts.size(); ++u) {
    size_t begin = starts[u], end = u + 1 < starts.size() ? starts[u + 1] : layers_.size();
    if (begin == end) continue;  // an empty Sequential has no units
    StageUnit unit;
    unit.name = std::to_string(begin) + (end - begin > 1 ? "-" + std::to_string(end - 1) : "");
    std::vector<ModulePtr> layers(layers_.begin() + begin, layers_.begin() + end);
    for (size_t i = begin; i < end; ++i) unit.modules.emplace_back(std::to_string(i), layers_[i]);
    unit.forward = [layers](const Tensor& x) { return forward_layers(layers, x); };
    units.push_back(std::move(unit));
  }
  return units;
}

std::string Sequential::describe() const {
  std::string out = "Sequential(\n";
  for (size_t i = 0; i < layers_.size(); ++i)
    out += "  (" + std::to_string(i) + ") " + layers_[i]->describe() + "\n";
  return out + ")";
}

}  // namespace dpt::nn
