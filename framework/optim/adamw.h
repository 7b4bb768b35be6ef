// AdamW (Loshchilov & Hutter 2019): Adam on the gradient, weight decay applied to the
// weights directly (p -= lr * wd * p), not through the gradient.
#pragma once

#include "optim/optimizer.h"

namespace dpt::optim {

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options);
  void step(float lr) override;
  void step_prepare(float lr) override;
  void step_apply() override;
  std::vector<std::string> state_kinds() const override {
    return {"exp_avg", "exp_avg_sq"};
  }  // PyTorch's names
  int64_t step_count() const override { return steps_; }
  void set_step_count(int64_t steps) override { steps_ = steps; }

 private:
  // scalars: null for step(lr), step_prepare's values for step_apply().
  void update(float lr, const DeviceScalars* scalars);

  AdamWOptions options_;
  int64_t steps_ = 0;
};

}  // namespace dpt::optim
