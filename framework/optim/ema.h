// Exponential moving average of the weights, for evaluation: averaging the last few
// thousand steps' parameters usually evaluates better than the last step's alone.
// Buffers (batch-norm running statistics) are copied, not averaged.
#pragma once

#include <memory>

#include "nn/module.h"
#include "optim/device_scalars.h"

namespace dpt::optim {

class Ema {
 public:
  // Requires 0 <= decay < 1. Starts from the model's current values.
  Ema(const nn::Module& model, float decay);
  // shadow = decay * shadow + (1 - decay) * current, after each optimizer step. With
  // warm-up the decay used is min(decay, (1 + updates) / (10 + updates)), so early
  // averages do not hold on to the random initialisation.
  void update(const nn::Module& model);
  // CUDA graphs: update() in two halves, as Optimizer::step_prepare / step_apply.
  void update_prepare();
  void update_apply(const nn::Module& model);
  const nn::NamedTensors& shadow() const { return shadow_; }
  // Updates so far (they set the warm-up decay), for checkpoints.
  int64_t updates() const { return updates_; }
  void set_updates(int64_t updates) { updates_ = updates; }

  // While alive, the model holds the averaged weights; the trained ones come back after.
  class Swap {
   public:
    Swap(Ema& ema, nn::Module& model);
    ~Swap();
    Swap(const Swap&) = delete;
    Swap& operator=(const Swap&) = delete;

   private:
    nn::Module& model_;
    nn::NamedTensors saved_;
  };

 private:
  // decay_on_device: null for update(), update_prepare's value for update_apply().
  void apply(const nn::Module& model, float d, const float* decay_on_device);

  float decay_;
  std::unique_ptr<DeviceScalars> device_decay_;
  int64_t updates_ = 0;
  nn::NamedTensors shadow_;  // the model's state_dict order
};

}  // namespace dpt::optim
