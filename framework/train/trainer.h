// A training run as an object: config in; data, model, optimizer, schedule, steps,
// evaluation after each epoch, checkpoints and metrics out. train.cpp is argument parsing
// around Trainer(config).run(); a test drives it in-process the same way. What changes
// with the kind of parallelism sits behind the parallel plan (parallel_plan.h).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "datasets/loader.h"
#include "io/config.h"
#include "io/progress.h"
#include "io/run_control.h"
#include "models/registry.h"
#include "nn/module.h"
#include "optim/ema.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "profile/step_profiler.h"
#include "train/batch_source.h"
#include "train/parallel_plan.h"
#include "train/step.h"

namespace dpt::train {

struct TrainData {
  data::Dataset train, test;
};

// What the program adds to the config: the command line's options and a test's step hook.
struct TrainerOptions {
  std::string resume;                 // --resume: "" (a fresh start), "auto" or a checkpoint's path
  profile::TimelineOptions timeline;  // --timeline, --timeline-steps
  bool sync_phases = false;           // --sync-phases: on a GPU, wait for it at each phase boundary
  io::StepHook step_hook;             // for tests only (io/run_control.h); train sets none
};

class Trainer {
 public:
  // Sets the run up on every rank; rank 0 prints the device and model lines. Requires
  // dist::init(). Collective. Throws dpt::Error (one line) for what the config asks and
  // this machine, its data or its checkpoints cannot give.
  explicit Trainer(io::Config config, TrainerOptions options = {});
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains the epochs left, evaluating after each; rank 0 prints and appends a line per
  // epoch and at the end writes model.safetensors and summary.json. Collective. Returns the
  // exit code: 0 when done, 3 after non-finite gradients (on_nonfinite: stop), 128 + N
  // after signal N.
  int run();

  // The bare model (not its DDP wrapper): what checkpoints and model.safetensors hold.
  nn::Module& model() { return *net_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct EpochSteps;

  void make_loaders();
  EpochSteps train_steps(int64_t epoch, Clock::time_point epoch_start);
  int finish(Clock::time_point run_start);

  io::Config config_;
  TrainerOptions options_;
  io::Progress progress_;  // the live line
  Device device_;
  ParallelLayout layout_;  // the groups: dp, tp, pp; this rank's data share
  TrainData data_;
  models::ModelSpec spec_;              // the training data's shapes, the seed, the tp group
  nn::ModulePtr net_;                   // the bare model
  std::unique_ptr<ParallelPlan> plan_;  // made from the layout; plan_->module() is what steps call
  std::unique_ptr<BatchSource> train_batches_, test_batches_;
  int64_t steps_ = 0;         // per epoch
  int64_t global_batch_ = 0;  // per step, over the dp ranks
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::Ema> ema_;  // null without ema_decay
  std::optional<optim::LrSchedule> schedule_;
  std::unique_ptr<Step> step_;
  std::unique_ptr<io::RunControl> control_;
  std::unique_ptr<profile::StepProfiler> profiler_;
};

}  // namespace dpt::train
