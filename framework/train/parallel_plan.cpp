#include "train/parallel_plan.h"

#include <cstdio>

#include "comm/dist.h"
#include "nn/pipeline_stage.h"
#include "parallel/ddp.h"
#include "parallel/pipeline.h"
#include "train/pipeline_step.h"

namespace dpt::train {
namespace {

// `module` wrapped in DDP over `group` as the config's `distributed` keys ask, or `module`
// itself when the group has one rank: the one place a run builds DDP, for the whole model
// and a pipeline stage alike, so the DDP keys go from the config to DDP here alone.
nn::ModulePtr data_parallel(nn::ModulePtr module, dist::GroupPtr group, const io::Config& config) {
  if (group->size() == 1) return module;
  // The config holds DDP's keys as DDP takes them; shard_gradients, which is no key, follows
  // the optimizer: a sharded one (make_optimizer) needs the gradients reduce-scattered.
  dist::DdpOptions options = config.distributed.ddp;
  options.shard_gradients = config.optimizer.shard;
  return std::make_shared<dist::DistributedDataParallel>(std::move(module), std::move(group), options);
}

void backend_check(Device device, io::CommBackend backend) {
  // A group carries each tensor where it lives (MPI for host memory, NCCL for device memory):
  // `backend` states which of the two the user expects, and is refused where the other one is.
  const bool cuda = device.is_cuda();
  DPT_CHECK(backend != io::CommBackend::nccl || cuda)
      << "distributed.backend: nccl carries CUDA tensors, but this run trains on " << device.str()
      << ": set device: cuda, or distributed.backend: auto or mpi";
  DPT_CHECK(backend != io::CommBackend::mpi || !cuda)
      << "distributed.backend: mpi carries host tensors, but this run trains on " << device.str()
      << " (dpt moves CUDA tensors through NCCL): set distributed.backend: auto or nccl, or device: cpu";
}

// The whole model on every rank, in DDP over the dp group (the world without a mesh, or
// beside tensor-parallel slices); the optimizer shards itself over DDP with optimizer.shard.
class DataParallelPlan : public ParallelPlan {
 public:
  DataParallelPlan(const io::Config& config, const ParallelLayout& layout) : ParallelPlan(config, layout) {}

  // With a tp mesh, "mesh: dp 2 x tp 2, rank r at (dp r / 2, tp r % 2): ...": the world
  // table (dist/world_table.h) that follows lists each group's members and group ranks.
  std::string describe() const override {
    if (!layout_.tp_group) return "";
    const std::string tp = std::to_string(layout_.tp);
    return "mesh: dp " + std::to_string(layout_.dp) + " x tp " + tp + ", rank r at (dp r / " + tp + ", tp r % " +
           tp + "): DDP over the groups mesh.dp, the model's layers split over the groups mesh.tp\n";
  }

  std::unique_ptr<Step> make_step(optim::Optimizer& optimizer, optim::Ema* ema,
                                  const data::Dataset& train) override {
    return train::make_step(config_, *module_, *net_, optimizer, ema, train);
  }

  EvalResult evaluate(BatchSource& test, optim::Ema* ema) override {
    if (!ema) return train::evaluate(*module_, test, layout_.data_rank, layout_.dp);
    optim::Ema::Swap averaged(*ema, *net_);
    return train::evaluate(*module_, test, layout_.data_rank, layout_.dp);
  }
};

// parallel.pp > 1: the ranks form a pp x dp mesh, each rank trains one stage
// (nn/pipeline_stage.h) of one data-parallel replica, and a step sends its micro-batches
// through the stages (PipelineStep). Every rank holds the whole model: the stages share
// its tensors, and gather() makes it whole again for evaluation and saving.
class PipelinePlan : public ParallelPlan {
 public:
  PipelinePlan(const io::Config& config, const ParallelLayout& layout) : ParallelPlan(config, layout) {
    // What a pipelined run does not do yet: each is refused by its key rather than run wrong.
    const io::Config& c = config;
    const std::string pp = "parallel.pp: " + std::to_string(c.parallel.pp) + " ";
    const struct {
      const char* key;
      bool refused;
      const char* why;
    } options[] = {
        {"checkpoint.every_epochs", c.checkpoint.every_epochs != 0,
         "trains without checkpoints (each stage's optimizer state lives on its own rank): set "
         "checkpoint.every_epochs: 0"},
        {"cuda_graphs", c.cuda_graphs, "runs its steps eagerly: set cuda_graphs: false"},
        {"ema_decay", c.ema_decay > 0, "keeps no weight average: set ema_decay: 0"},
        {"distributed.sync_bn", c.distributed.ddp.sync_bn,
         "normalises each micro-batch on its own: set distributed.sync_bn: false"},
        {"distributed.compress", c.distributed.ddp.compress != dist::Compression::none,
         "all-reduces each stage's gradients in f32: set distributed.compress: none"},
        {"on_nonfinite", c.on_nonfinite == io::NonfiniteAction::skip,
         "stops on non-finite gradients: set on_nonfinite: stop"},
        {"optimizer.shard", c.optimizer.shard,
         "keeps each stage's optimizer state whole: set optimizer.shard: false"},
    };
    for (const auto& o : options)
      DPT_CHECK(!o.refused) << c.source << ": key '" << o.key << "': " << pp << o.why;
  }

  nn::ModulePtr trained_part() const override { return nn::split_stage(*net_, layout_.pp, layout_.stage); }

  // The mesh, each stage's units and ranks, the schedule.
  std::string describe() const override {
    const int64_t m = config_.pipeline.micro_batches;
    const int dp = layout_.dp;
    std::string out = "pipeline: " + std::to_string(layout_.pp) + " stages x " + std::to_string(dp) +
                      " data-parallel replicas; rank r holds stage r / " + std::to_string(dp) +
                      " of replica r % " + std::to_string(dp) + "; " +
                      dist::pipeline_schedule_name(config_.pipeline.schedule) + ", " + std::to_string(m) +
                      " micro-batches of " + std::to_string(config_.batch_size / m) + " per step\n";
    for (int s = 0; s < layout_.pp; ++s) {
      std::string ranks;
      for (int d = 0; d < dp; ++d) ranks += (d ? ", " : "") + std::to_string(s * dp + d);
      const std::string stage = nn::split_stage(*net_, layout_.pp, s)->describe();
      out += "  stage " + std::to_string(s) + " on rank" + (dp > 1 ? "s " : " ") + ranks + ": " +
             stage.substr(stage.find(": ") + 2, stage.size() - stage.find(": ") - 3) + "\n";
    }
    return out;
  }

  std::unique_ptr<Step> make_step(optim::Optimizer& optimizer, optim::Ema*, const data::Dataset&) override {
    auto step = std::make_unique<PipelineStep>(config_, module_, layout_, optimizer);
    step_ = step.get();
    return step;
  }

  // Each stage's parameters and buffers, broadcast from the rank that trains them to the
  // other ranks of its pipeline group. Collective over the pp group.
  void gather() override {
    std::vector<dist::WorkPtr> pending;
    for (int s = 0; s < layout_.pp; ++s)
      for (const auto& [name, tensor] : nn::split_stage(*net_, layout_.pp, s)->state_dict())
        pending.push_back(layout_.pp_group->broadcast(tensor, s));
    for (const dist::WorkPtr& work : pending) work->wait();
  }

  // Every rank evaluates its share of the test set with the whole model (no EMA: refused).
  EvalResult evaluate(BatchSource& test, optim::Ema*) override {
    gather();
    return train::evaluate(*net_, test);
  }

  std::string epoch_lines() override {
    const double bubble = step_->take_bubble();  // collective
    char line[160];
    std::snprintf(line, sizeof line,
                  "  pipeline bubble %.3f (idle / step time over the ranks; %.3f for equal stages)\n", bubble,
                  step_->bubble_theory());
    return line;
  }

 private:
  PipelineStep* step_ = nullptr;  // make_step's, for the bubble
};

}  // namespace

void ParallelPlan::wrap(const nn::ModulePtr& net, Device device) {
  backend_check(device, config_.distributed.backend);
  net->to(device);  // the whole model, also with pp > 1: evaluation runs it after gather()
  net_ = net;
  module_ = data_parallel(trained_part(), layout_.dp_group, config_);
}

std::unique_ptr<ParallelPlan> make_plan(const io::Config& config, const ParallelLayout& layout) {
  if (layout.pp > 1) return std::make_unique<PipelinePlan>(config, layout);
  return std::make_unique<DataParallelPlan>(config, layout);
}

}  // namespace dpt::train
