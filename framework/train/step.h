// One training step on one batch: forward, loss, backward and update. The Trainer knows a
// step only through this interface; the plan (parallel_plan.cpp) makes it: eager, one CUDA
// graph, or the pipeline's.
#pragma once

#include <cstdint>
#include <string>

#include "datasets/loader.h"
#include "io/loss_meter.h"
#include "io/run_control.h"
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
  // What rank 0 prints under an epoch's line (lines ending in \n, or ""). Collective.
  virtual std::string epoch_lines() { return ""; }
};

}  // namespace dpt::train
