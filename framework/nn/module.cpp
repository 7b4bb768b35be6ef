#include "nn/module.h"

#include <map>

#include "autograd/node.h"

namespace dpt::nn {

const Tensor& Module::register_parameter(const std::string& name, Tensor value) {
  value.set_requires_grad(true);
  parameters_.emplace_back(name, std::move(value));
  return parameters_.back().second;
}

const Tensor& Module::register_buffer(const std::string& name, Tensor value) {
  buffers_.emplace_back(name, std::move(value));
  return buffers_.back().second;
}

void Module::collect(const std::string& prefix, bool parameters, NamedTensors& out) const {
  for (const auto& [name, t] : parameters ? parameters_ : buffers_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", parameters, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, out);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& entry : named_buffers()) out.push_back(entry);
  return out;
}

void Module::load_state_dict(const NamedTensors& state) {
  std::map<std::string, Tensor> given(state.begin(), state.end());
  autograd::NoGrad no_grad;
  for (auto& [name, target] : state_dict()) {
    auto it = given.find(name);
    DPT_CHECK(it != given.end()) << "load_state_dict: missing '" << name << "'";
    DPT_CHECK(it->second.shape() == target.shape())
        << "load_state_dict: '" << name << "' has shape " << shape_str(it->second.shape()) << ", model expects "
        << shape_str(target.shape());
    target.copy_from(it->second);
    given.erase(it);
  }
  DPT_CHECK(given.empty()) << "load_state_dict: unexpected entry '" << given.begin()->first << "'";
}

void Module::to(Device device) {
  autograd::NoGrad no_grad;
  for (auto& [name, t] : state_dict()) {
    if (t.device() == device) continue;
    Tensor moved = t.detach().to(device);
    TensorImpl* impl = t.impl();  // the same TensorImpl, now viewing the new storage
    impl->storage = moved.storage();
    impl->offset = moved.offset();
    impl->strides = moved.strides();
    if (impl->grad.defined()) impl->grad = impl->grad.to(device);
  }
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out{this};
  for (auto& [name, child] : children_)
    for (Module* m : child->modules()) out.push_back(m);
  return out;
}

void Module::set_compute(const Compute& compute) {
  for (Module* m : modules()) m->compute_ = compute;
}

void Module::train(bool on) {
  for (Module* m : modules()) m->training_ = on;
}

}  // namespace dpt::nn
