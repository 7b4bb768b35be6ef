// How a run spreads its training over the ranks, decided once from `parallel:`,
// `distributed:` and `optimizer.shard`: data parallelism (DDP over dp, layers split over
// tp) or pipeline stages (pp > 1, each in DDP over dp). What differs between layouts is
// here and in the step a plan makes, never a branch of the training loop.
#pragma once

#include <memory>
#include <string>

#include "comm/process_group.h"
#include "io/config.h"
#include "nn/module.h"
#include "optim/ema.h"
#include "optim/optimizer.h"
#include "train/batch_source.h"
#include "train/step.h"

namespace dpt::train {

struct EvalResult {
  double loss = 0;      // mean cross-entropy over the test set
  double accuracy = 0;  // fraction of samples whose largest logit (the first on ties) is the label
};

// Evaluates `model` on the whole of `source`'s dataset in eval mode without gradients (back
// in training mode after); this rank runs part `share` of `shares` (data::eval_shard; -1:
// one per rank; a tensor-parallel model passes its dp coordinate and size). The totals
// (loss x samples, correct, samples) stay on the device until they are summed over the
// ranks. Collective; every rank gets the same result. Throws dpt::Error for 2^24 test
// samples or more (f32 counts).
EvalResult evaluate(nn::Module& model, BatchSource& source, int share = -1, int shares = -1);

// How a run lays its ranks out: the `parallel:` section as a device mesh. With tp > 1, dp x
// tp ranks, tp varying fastest (as Megatron-LM); with pp > 1, pp x dp ranks, rank r holding
// stage r / dp of replica r % dp; otherwise DDP over the world. The ranks of one tp group,
// or of one pipeline, read the same samples.
struct ParallelLayout {
  int dp = 1, tp = 1, pp = 1;
  dist::GroupPtr dp_group;  // DDP's: the ranks holding the same slices (or stage) of the model
  dist::GroupPtr tp_group;  // the model's, with tp > 1: the ranks splitting its layers
  dist::GroupPtr pp_group;  // with pp > 1: the stages of this rank's replica, in stage order
  int stage = 0;            // the pipeline stage this rank trains
  int data_rank = 0;        // which of the dp shares of each batch and epoch this rank reads
};

// The layout `config.parallel` asks for, its groups made from a dist::DeviceMesh when tp > 1
// or pp > 1. Collective over the world. Throws dpt::Error (one line, naming the key and the
// world size) when dp x tp x pp is not the world size; for tp > 1 with pp > 1; for tp > 1 with
// a model whose `tensor_parallel` is not true (it would be copied, not split); for tp > 1 with
// checkpoints or `resume` (a checkpoint holds one rank's model, a tp rank holds a slice); and
// for pp > 1 with `resume` (its checkpoints hold one stage's optimizer state).
ParallelLayout parallel_layout(const io::Config& config, const std::string& resume);

class ParallelPlan {
 public:
  virtual ~ParallelPlan() = default;

  // Moves `net` (the bare model) to `device` and wraps what this rank trains (the model or
  // its stage) in DDP over the dp group (bare on one rank). Before the optimizer, the EMA
  // and a checkpoint's load. Collective over the dp group.
  void wrap(const nn::ModulePtr& net, Device device);
  // What wrap made: what the optimizer, the profiler and the step train.
  nn::Module& module() const { return *module_; }
  // What rank 0 prints about the layout before the world table: lines ending in \n, or "".
  virtual std::string describe() const = 0;
  // The per-batch step over module(), with `ema` (may be null) averaging the bare model.
  virtual std::unique_ptr<Step> make_step(optim::Optimizer& optimizer, optim::Ema* ema,
                                          const data::Dataset& train) = 0;
  // Makes the bare model whole on every rank (a pipeline's stages broadcast). Collective.
  virtual void gather() {}
  // The test set's loss and accuracy (the EMA's weights when given). Collective.
  virtual EvalResult evaluate(BatchSource& test, optim::Ema* ema) = 0;

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
