// Module: a layer or a network. Parameters, buffers and children live in ordered, named
// lists filled by register_*, so every rank sees the same order (DDP's buckets and the
// initial broadcast rely on it) and error messages can name a parameter.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/compute.h"

namespace dpt::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
  // Short description for printing, e.g. "Conv2d(1, 32, kernel 3, stride 1, padding 1)".
  virtual std::string describe() const { return "Module"; }

  // Recursive, in registration order, names joined with '.': "features.0.weight".
  NamedTensors named_parameters() const;
  NamedTensors named_buffers() const;
  std::vector<Tensor> parameters() const;
  int64_t parameter_count() const;
  // Parameters then buffers, by name (what a checkpoint holds).
  NamedTensors state_dict() const;
  // Copies values in; every name must exist with the same shape, else an Error naming it.
  void load_state_dict(const NamedTensors& state);

  // Moves every parameter and buffer (and gradient) to `device` in place, each tensor
  // keeping its identity (handles held elsewhere see the move). Build the optimizer after.
  void to(Device device);

  // This module and every descendant, depth first in registration order.
  std::vector<Module*> modules();

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // How this module and every descendant compute (nn/compute.h): bf16 and/or channels-last
  // on CUDA. f32 NCHW (the default) leaves every layer as it is.
  void set_compute(const Compute& compute);
  const Compute& compute() const { return compute_; }

  // This module's own parameters, not its children's.
  const NamedTensors& own_parameters() const { return parameters_; }

  // A hook a layer runs before its forward reads its own parameters (ZeRO-1 waits there
  // for their all-gather); calls_before_forward(): whether this module runs it.
  void set_before_forward(std::function<void()> hook) { before_forward_ = std::move(hook); }
  virtual bool calls_before_forward() const { return false; }

 protected:
  const Tensor& register_parameter(const std::string& name, Tensor value);
  const Tensor& register_buffer(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }
  void before_forward() const {
    if (before_forward_) before_forward_();
  }

 private:
  void collect(const std::string& prefix, bool parameters, NamedTensors& out) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  Compute compute_;
  std::function<void()> before_forward_;
};

using ModulePtr = std::shared_ptr<Module>;

}  // namespace dpt::nn
