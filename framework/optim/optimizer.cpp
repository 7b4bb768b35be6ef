#include "optim/optimizer.h"

#include "optim/device_scalars.h"

namespace dpt::optim {

std::vector<ParamGroup> param_groups(const nn::Module& model, float weight_decay, bool no_decay_1d) {
  ParamGroup decay{{}, weight_decay}, no_decay{{}, no_decay_1d ? 0.0f : weight_decay};
  for (auto& [name, p] : model.named_parameters()) (p.dim() > 1 ? decay : no_decay).params.push_back(p);
  return {decay, no_decay};
}

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {}

Optimizer::~Optimizer() = default;

DeviceScalars& Optimizer::device_scalars(size_t count) {
  if (!device_scalars_) {
    Device device = Device::cpu();
    for (const auto& group : groups_)
      if (!group.params.empty()) {
        device = group.params.front().device();
        break;
      }
    device_scalars_ = std::make_unique<DeviceScalars>(count, device);
  }
  return *device_scalars_;
}

void Optimizer::zero_grad() {
  for (auto& group : groups_)
    for (auto& p : group.params)
      if (p.grad().defined()) p.grad().zero_();
}

void Optimizer::state_make(size_t kinds) {
  state_.assign(kinds, {});
  for (auto& tensors : state_)
    for (const auto& group : groups_)
      for (const auto& p : group.params) tensors.push_back(Tensor::zeros(p.shape(), DType::f32, p.device()));
}

std::vector<Optimizer::StateTensor> Optimizer::state_tensors() const {
  const std::vector<std::string> kinds = state_kinds();
  std::vector<StateTensor> out;
  size_t i = 0;
  for (const auto& group : groups_)
    for (const auto& p : group.params) {
      for (size_t k = 0; k < kinds.size(); ++k) out.push_back({kinds[k], p, state_[k][i]});
      ++i;
    }
  return out;
}

int64_t Optimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : state_tensors())
    bytes += s.value.numel() * static_cast<int64_t>(dtype_size(s.value.dtype()));
  return bytes;
}

std::vector<Tensor> Optimizer::step_gradients() const {
  std::vector<Tensor> grads;
  for (const auto& group : groups_)
    for (const auto& p : group.params) grads.push_back(p.grad());
  return grads;
}

const DeviceScalars& Optimizer::prepared_scalars(const char* owner) const {
  DPT_CHECK(device_scalars_) << owner << ": step_apply() before any step_prepare(lr)";
  return *device_scalars_;
}

}  // namespace dpt::optim
