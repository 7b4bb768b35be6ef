// How a run spreads its training over the ranks, decided once from `parallel:`,
// `distributed:` and `optimizer.shard`: data parallelism (DDP over the dp group, the model's
// layers split over tp, the optimizer sharded with optimizer.shard) or pipeline stages
// (parallel.pp > 1, each stage in DDP over dp). The Trainer calls a plan the same way
// whatever the layout, so what differs between layouts is here and in the step a plan
// makes, never a branch of the training loop.
#pragma once

#include <memory>
#include <string>

#include "io/config.h"
#include "nn/module.h"
#include "optim/ema.h"
#include "optim/optimizer.h"
#include "train/batch_source.h"
#include "train/evaluate.h"
#include "train/parallel.h"
#include "train/step.h"

namespace dpt::train {

class ParallelPlan {
 public:
  virtual ~ParallelPlan() = default;

  // Moves `net` (the bare model) to `device` and wraps what this rank trains (the model, or
  // with pp > 1 its stage) in DDP over the dp group, as the `distributed` keys ask; on a dp
  // group of one rank, leaves it bare. Before the optimizer, the EMA and a checkpoint's load
  // (their state is made where the parameters are). Collective over the dp group.
  void wrap(const nn::ModulePtr& net, Device device);
  // What wrap made: what the optimizer, the profiler and the step train.
  nn::Module& module() const { return *module_; }
  // What rank 0 prints about the layout before the world table: lines ending in \n, or "".
  virtual std::string describe() const = 0;
  // The per-batch step over module(), with `ema` (may be null) averaging the bare model.
  virtual std::unique_ptr<Step> make_step(optim::Optimizer& optimizer, optim::Ema* ema,
                                          const data::Dataset& train) = 0;
  // Makes the bare model whole on every rank, as a checkpoint and evaluation need: a
  // pipeline's stages broadcast their weights; a data-parallel rank holds them already.
  // Collective.
  virtual void gather() {}
  // The test set's loss and accuracy with the trained weights (the EMA's when there is
  // one), each rank evaluating its share. Collective over the world.
  virtual EvalResult evaluate(BatchSource& test, optim::Ema* ema) = 0;
  // What rank 0 prints under an epoch's line (lines ending in \n, or ""). Collective over
  // the world.
  virtual std::string epoch_lines() { return ""; }

 protected:
  ParallelPlan(const io::Config& config, const ParallelLayout& layout) : config_(config), layout_(layout) {}
  // What this rank trains of net_: the whole model, or its pipeline stage (sharing its tensors).
  virtual nn::ModulePtr trained_part() const { return net_; }
  const io::Config& config_;
  const ParallelLayout& layout_;
  nn::ModulePtr net_, module_;  // the bare model; what wrap made of it
};

// The plan for `layout` (parallel_layout(config)), keeping references to both. Throws
// dpt::Error, naming the key, for an option the plan cannot honour (with pp > 1:
// checkpoints, cuda_graphs, ema_decay, sync_bn, compress, on_nonfinite: skip,
// optimizer.shard), rather than training without it.
std::unique_ptr<ParallelPlan> make_plan(const io::Config& config, const ParallelLayout& layout);

}  // namespace dpt::train
