// Optimizers update parameters in place from their .grad, by parameter group (each group
// has its own weight decay, so biases and batch-norm parameters can go without).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/module.h"

namespace dpt::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  float weight_decay = 0.0f;
};

// Two groups: multi-dimensional weights with `weight_decay`, and 1-D parameters (biases,
// batch-norm scale and shift) with `weight_decay` too unless `no_decay_1d`.
std::vector<ParamGroup> param_groups(const nn::Module& model, float weight_decay, bool no_decay_1d);

class DeviceScalars;

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer();
  // Applies one update with learning rate `lr`. Parameters without a gradient are skipped.
  virtual void step(float lr) = 0;
  // CUDA graphs: step(lr) in two halves, so that the device half can be captured once and
  // replayed. step_prepare(lr), the host half, computes the step's values (learning rate,
  // AdamW's step count, bias corrections and decays) as step(lr) does and uploads them to
  // device memory; step_apply() only queues the update kernels, which read those values
  // there as they run. Together they update exactly as step(lr) does. Requires every
  // parameter on one CUDA device (dpt::Error otherwise).
  virtual void step_prepare(float lr) = 0;
  virtual void step_apply() = 0;
  // Sets every gradient to zero in place (a gradient may be a view DDP owns).
  void zero_grad();

  // Per-parameter state for checkpoints: `kind` names it ("momentum", "exp_avg",
  // "exp_avg_sq"), `param` is the parameter it belongs to, `value` the optimizer's own
  // tensor (loading a checkpoint copies into it). In group order.
  struct StateTensor {
    std::string kind;
    Tensor param;
    Tensor value;
  };
  virtual std::vector<StateTensor> state_tensors() const = 0;
  // Updates taken, where the rule depends on it (AdamW's bias correction); else 0.
  virtual int64_t step_count() const { return 0; }
  virtual void set_step_count(int64_t) {}

 protected:
  // The device values of step_prepare: `count` of them, made on the first call, on the
  // first parameter's device.
  DeviceScalars& device_scalars(size_t count, const char* owner);
  // Those values for step_apply; dpt::Error when step_prepare has not made them.
  const DeviceScalars& prepared_scalars(const char* owner) const;

  std::vector<ParamGroup> groups_;

 private:
  std::unique_ptr<DeviceScalars> device_scalars_;
};

}  // namespace dpt::optim
