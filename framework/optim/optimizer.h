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
  // CUDA graphs: step(lr) in two halves, together updating exactly as it does.
  // step_prepare(lr), the host half, computes the step's values and uploads them;
  // step_apply() only queues the kernels, which read them on the device (capturable).
  // Requires every parameter on one device.
  virtual void step_prepare(float lr) = 0;
  virtual void step_apply() = 0;
  // Sets every gradient to zero in place (a gradient may be a view DDP owns).
  void zero_grad();
  // Waits until every parameter holds the last step()'s value (a sharded optimizer may
  // return from step() before): call it before reading parameters outside a forward.
  virtual void parameters_ready() {}

  // Per-parameter state in group order: `kind` ("momentum", "exp_avg", ...), the parameter
  // and the optimizer's own tensor. A sharded optimizer lists its shard (1-D views).
  struct StateTensor {
    std::string kind;
    Tensor param;
    Tensor value;
  };
  virtual std::vector<StateTensor> state_tensors() const;  // by default state_'s
  // The kinds of state each parameter has, in state_tensors()' order (none for plain SGD).
  virtual std::vector<std::string> state_kinds() const = 0;
  // Bytes of state_tensors() on this rank.
  int64_t state_bytes() const;
  // Updates taken, where the rule depends on it (AdamW's bias correction); else 0.
  virtual int64_t step_count() const { return 0; }
  virtual void set_step_count(int64_t) {}

  // Checkpoints hold the state whole (one tensor of its parameter's shape per kind and
  // parameter), sharded or not. state_for_save: a sharded optimizer gathers it, collective,
  // whole on its group's rank 0 and empty elsewhere. state_for_load: tensors of that form to
  // read a checkpoint into, then state_loaded() (a sharded one keeps its part).
  virtual std::vector<StateTensor> state_for_save() { return state_tensors(); }
  virtual std::vector<StateTensor> state_for_load() { return state_tensors(); }
  virtual void state_loaded() {}

  // The gradients step() reads (a sharded optimizer's shard), for optim/nonfinite.h.
  virtual std::vector<Tensor> step_gradients() const;
  // Whether `ok` holds on every rank sharing the update (collective when sharded).
  virtual bool all_ranks(bool ok) const { return ok; }

 protected:
  // step_prepare's `count` values, made on the first call on the first parameter's device.
  DeviceScalars& device_scalars(size_t count);
  // Those values for step_apply; dpt::Error when step_prepare has not made them.
  const DeviceScalars& prepared_scalars(const char* owner) const;
  // Fills state_ with `kinds` zero tensors per parameter, each of its parameter's shape and device.
  void state_make(size_t kinds);

  std::vector<ParamGroup> groups_;
  std::vector<std::vector<Tensor>> state_;  // [kind][parameter in group order]

 private:
  std::unique_ptr<DeviceScalars> device_scalars_;
};

}  // namespace dpt::optim
