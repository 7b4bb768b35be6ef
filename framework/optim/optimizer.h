// Optimizers update parameters in place from their .grad, by parameter group (each group
// has its own weight decay, so biases and batch-norm parameters can go without).
#pragma once

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

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;
  // Applies one update with learning rate `lr`. Parameters without a gradient are skipped.
  virtual void step(float lr) = 0;
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
  std::vector<ParamGroup> groups_;
};

}  // namespace dpt::optim
