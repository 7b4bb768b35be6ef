// One training step on one batch: forward, loss, backward and update. The Trainer knows a
// step only through this interface.
#pragma once

#include <cstdint>
#include <memory>

#include "datasets/dataset.h"
#include "datasets/loader.h"
#include "io/config.h"
#include "io/loss_meter.h"
#include "io/run_control.h"
#include "nn/module.h"
#include "optim/ema.h"
#include "optim/optimizer.h"
#include "profile/step_profiler.h"

namespace dpt::train {

// Where a step stands, for run control's messages: `epoch` from 0, `step` the step's
// number in the epoch from 1, of `steps`.
struct StepAt {
  int64_t epoch, step, steps;
};

// The run around a step, lent to each call: run control (a test's step hook, the non-finite
// verdict), the phase timer and the epoch's loss sum.
struct StepHooks {
  io::RunControl& control;
  profile::StepProfiler& profiler;
  io::LossMeter& losses;
};

class Step {
 public:
  virtual ~Step() = default;
  // Runs the step on `batch` at learning rate `lr`. Requires: hooks.control.before_forward()
  // was called for it. Ensures: the profiler has lapped each phase (up to backward when the
  // verdict is stop); an applied step's loss is in hooks.losses. Returns run control's
  // verdict: apply (the update was made), skip (non-finite gradients, no update) or stop.
  virtual io::RunControl::StepAction run(const data::Batch& batch, float lr, StepAt at, StepHooks hooks) = 0;
};

// The step the config asks for: with `cuda_graphs: true` one CUDA graph (throws dpt::Error
// unless `net` is on a CUDA device), else eager. `model` is what the step calls (DDP or the
// bare model), `net` the bare model; `train` gives the batch shape. Keeps references.
std::unique_ptr<Step> make_step(const io::Config& config, nn::Module& model, nn::Module& net,
                                optim::Optimizer& optimizer, optim::Ema* ema, const data::Dataset& train);

}  // namespace dpt::train
