#include "train/parallel_plan.h"

#include <cmath>
#include <cstdio>

#include "autograd/node.h"
#include "backend/kernels.h"
#include "comm/dist.h"
#include "datasets/sampler.h"
#include "nn/pipeline_stage.h"
#include "ops/loss.h"
#include "optim/graphed_train_step.h"
#include "optim/nonfinite.h"
#include "parallel/ddp.h"
#include "parallel/pipeline.h"

namespace dpt::train {
namespace {

using StepAction = io::RunControl::StepAction;

class EagerStep : public Step {
 public:
  EagerStep(nn::Module& model, nn::Module& net, optim::Optimizer& optimizer, optim::Ema* ema,
            float label_smoothing)
      : model_(model), net_(net), optimizer_(optimizer), ema_(ema), label_smoothing_(label_smoothing) {}

  StepAction run(const data::Batch& batch, float lr, StepAt at, StepHooks hooks) override {
    Tensor loss =
        hooks.control.loss_hook(cross_entropy(model_(batch.images), batch.labels, label_smoothing_));
    hooks.profiler.lap(profile::Phase::forward);
    optimizer_.zero_grad();
    loss.backward();
    hooks.profiler.lap(profile::Phase::backward);
    const StepAction action = hooks.control.after_backward(loss, at.epoch, at.step, at.steps);
    if (action == StepAction::stop) return action;
    if (action == StepAction::apply) {
      optimizer_.step(lr);
      if (ema_) {
        optimizer_.parameters_ready();
        ema_->update(net_);
      }
      hooks.losses.add(loss);
    }
    hooks.profiler.lap(profile::Phase::optimizer);
    return action;
  }

 private:
  nn::Module& model_;
  nn::Module& net_;
  optim::Optimizer& optimizer_;
  optim::Ema* ema_;
  float label_smoothing_;
};

// Forward, backward and update in one replay, timed as forward. A graph cannot branch on
// the verdict, so its update is made whatever it is: the config refuses cuda_graphs with
// on_nonfinite: skip, and a non-finite step stops the run.
class CudaGraphStep : public Step {
 public:
  explicit CudaGraphStep(std::unique_ptr<optim::GraphedTrainStep> graphed) : graphed_(std::move(graphed)) {}

  StepAction run(const data::Batch& batch, float lr, StepAt at, StepHooks hooks) override {
    optim::GraphedStepResult r = graphed_->run(batch.images, batch.labels, lr);
    hooks.profiler.lap(profile::Phase::forward);
    if (hooks.control.after_backward(r.finite, r.loss, at.epoch, at.step, at.steps) == StepAction::stop)
      return StepAction::stop;
    hooks.losses.add(r.loss);
    hooks.profiler.lap(profile::Phase::optimizer);  // ends the step's record
    return StepAction::apply;
  }

 private:
  std::unique_ptr<optim::GraphedTrainStep> graphed_;
};

// The whole model (or its tensor-parallel slices) on every rank, in DDP over the dp group.
class DataParallelPlan : public ParallelPlan {
 public:
  DataParallelPlan(const io::Config& config, const ParallelLayout& layout) : ParallelPlan(config, layout) {}

  // With a tp mesh, "mesh: dp 2 x tp 2, rank r at (dp r / 2, tp r % 2): ...".
  std::string describe() const override {
    if (!layout_.tp_group) return "";
    const std::string tp = std::to_string(layout_.tp);
    return "mesh: dp " + std::to_string(layout_.dp) + " x tp " + tp + ", rank r at (dp r / " + tp + ", tp r % " +
           tp + "): DDP over the groups mesh.dp, the model's layers split over the groups mesh.tp\n";
  }

  // With `cuda_graphs: true` one CUDA graph (an Error unless the model is on a CUDA
  // device), else eager.
  std::unique_ptr<Step> make_step(optim::Optimizer& optimizer, optim::Ema* ema,
                                  const data::Dataset& train) override {
    const float label_smoothing = static_cast<float>(config_.label_smoothing);
    if (!config_.cuda_graphs)
      return std::make_unique<EagerStep>(*module_, *net_, optimizer, ema, label_smoothing);
    const Device device = net_->parameters().front().device();
    DPT_CHECK(device.is_cuda()) << "cuda_graphs: true needs training on a CUDA device, but rank "
                                << dist::info().rank << " trains on " << device.str();
    return std::make_unique<CudaGraphStep>(std::make_unique<optim::GraphedTrainStep>(
        *module_, *net_, optimizer, ema, Shape{config_.batch_size, train.channels, train.height, train.width},
        optim::GraphedTrainOptions{.label_smoothing = label_smoothing,
                                   .classes = train.classes,
                                   .check_loss = dist::info().world_size == 1}));
  }

  EvalResult evaluate(BatchSource& test, optim::Ema* ema) override {
    if (!ema) return train::evaluate(*module_, test, layout_.data_rank, layout_.dp);
    optim::Ema::Swap averaged(*ema, *net_);
    return train::evaluate(*module_, test, layout_.data_rank, layout_.dp);
  }
};

// One training step through the pipeline (dist::Pipeline): every rank of a pipeline group
// passes the same batch; the loss is the cross-entropy of the last stage's output. A step is
// applied or stopped on every rank alike (the non-finite verdict is agreed over the world).
class PipelineStep : public Step {
 public:
  PipelineStep(const io::Config& config, nn::ModulePtr stage, const ParallelLayout& layout,
               optim::Optimizer& optimizer)
      : pipeline_(stage, layout.pp_group,
                  [this, smoothing = static_cast<float>(config.label_smoothing)](const Tensor& out,
                                                                                 const Tensor& y) {
                    return control_->loss_hook(cross_entropy(out, y, smoothing));
                  },
                  config.pipeline),
        optimizer_(optimizer),
        params_(stage->parameters()) {}

  StepAction run(const data::Batch& batch, float lr, StepAt at, StepHooks hooks) override {
    control_ = &hooks.control;
    optimizer_.zero_grad();
    const dist::PipelineStepStats stats = pipeline_.train_step(batch.images, batch.labels);
    hooks.profiler.lap(profile::Phase::forward);  // forwards and backwards interleave: all timed as forward
    idle_ms_ += stats.idle_ms;
    step_ms_ += stats.step_ms;
    // Each stage sees only its own gradients: the step is applied only if every stage's are finite.
    Tensor bad = Tensor::from_vector(
        std::vector<float>{std::isfinite(stats.loss) && optim::gradients_finite(params_) ? 0.0f : 1.0f}, {1});
    dist::world()->all_reduce(bad, dist::ReduceOp::max)->wait();
    if (hooks.control.after_backward(bad.item() == 0.0f, static_cast<float>(stats.loss), at.epoch, at.step,
                                     at.steps) == StepAction::stop)
      return StepAction::stop;
    optimizer_.step(lr);
    hooks.losses.add(stats.loss);
    hooks.profiler.lap(profile::Phase::optimizer);
    return StepAction::apply;
  }

  // The bubble line: the time stages waited (for their neighbours and messages) over their
  // step time, summed over the world's ranks and the steps since the last call, and what the
  // schedule's arithmetic predicts for equal stages. Collective over the world.
  std::string epoch_lines() override {
    Tensor times = Tensor::from_vector(
        std::vector<float>{static_cast<float>(idle_ms_), static_cast<float>(step_ms_)}, {2});
    dist::world()->all_reduce(times, dist::ReduceOp::sum)->wait();
    idle_ms_ = step_ms_ = 0;
    const float* t = times.data<float>();
    char line[160];
    std::snprintf(line, sizeof line,
                  "  pipeline bubble %.3f (idle / step time over the ranks; %.3f for equal stages)\n",
                  t[1] > 0 ? t[0] / t[1] : 0.0,
                  dist::pipeline_bubble_theory(pipeline_.stage().count(), pipeline_.options().micro_batches));
    return line;
  }

 private:
  dist::Pipeline pipeline_;
  optim::Optimizer& optimizer_;
  std::vector<Tensor> params_;         // the stage's
  io::RunControl* control_ = nullptr;  // the step's, for the loss hook
  double idle_ms_ = 0, step_ms_ = 0;   // since epoch_lines
};

// parallel.pp > 1: each rank of a pp x dp mesh trains one stage of one replica. Every rank
// holds the whole model (the stages share its tensors); gather() makes it whole again.
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
                      io::name_of(config_.pipeline.schedule) + ", " + std::to_string(m) +
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
    return std::make_unique<PipelineStep>(config_, module_, layout_, optimizer);
  }

  // Each stage's state, broadcast from the rank that trains it over the pp group.
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
};

}  // namespace

EvalResult evaluate(nn::Module& model, BatchSource& source, int share, int shares) {
  autograd::NoGrad no_grad;
  model.eval();
  const dist::InitInfo& world = dist::info();
  const int64_t samples = source.loader().dataset().size();
  if (share < 0) share = world.rank, shares = world.world_size;
  source.start_epoch(data::eval_shard(samples, share, shares));
  // The totals (loss summed over samples, correct predictions, samples) stay on the model's
  // device, are all-reduced there and read back once: a GPU is waited for only at the end.
  // They cover the whole test set, so every rank decides alike, before any collective.
  DPT_CHECK(samples < (int64_t{1} << 24))
      << "evaluation: " << samples << " test samples; the counts, kept in f32, are exact below 2^24";
  const Kernels& k = kernels_for(source.device());
  Tensor totals = Tensor::zeros({3}, DType::f32, source.device());
  data::Batch batch;
  while (source.next(batch)) {
    Tensor logits = model(batch.images);
    k.eval_totals_add(totals, cross_entropy(logits, batch.labels), logits, batch.labels);
  }
  if (world.world_size > 1) dist::world()->all_reduce(totals, dist::ReduceOp::sum)->wait();
  const std::vector<float> t = totals.to_vector();
  model.train();
  return {t[0] / t[2], t[1] / t[2]};
}

ParallelLayout parallel_layout(const io::Config& config, const std::string& resume) {
  const io::ParallelConfig& p = config.parallel;
  const int world = dist::info().world_size;
  ParallelLayout layout;
  layout.tp = static_cast<int>(p.tp);
  layout.pp = static_cast<int>(p.pp);
  DPT_CHECK(world % (p.tp * p.pp) == 0)
      << "parallel: tp " << p.tp << " x pp " << p.pp << " does not divide the world size " << world;
  layout.dp = p.dp > 0 ? static_cast<int>(p.dp) : world / (layout.tp * layout.pp);
  DPT_CHECK(layout.dp * layout.tp * layout.pp == world)
      << "parallel: dp " << layout.dp << " x tp " << layout.tp << " x pp " << layout.pp << " = "
      << layout.dp * layout.tp * layout.pp << " ranks, but the world size is " << world;
  DPT_CHECK(layout.pp == 1 || layout.tp == 1)
      << "parallel: tp " << layout.tp << " with pp " << layout.pp
      << ": train runs tensor parallelism or pipeline stages, not both";
  if (layout.tp > 1) {
    const YAML::Node split = config.model.node["tensor_parallel"];
    DPT_CHECK(split && split.as<bool>(false))
        << "parallel.tp: " << layout.tp << " needs a model with tensor_parallel: true (model '"
        << config.model.name << "' would be copied on each tp rank, not split)";
    DPT_CHECK(config.checkpoint.every_epochs == 0 && resume.empty())
        << "parallel.tp: " << layout.tp
        << " trains without checkpoints (a checkpoint holds rank 0's model, a tp rank holds a slice): set "
           "checkpoint.every_epochs: 0 and no --resume";
  }
  if (layout.pp > 1) {
    DPT_CHECK(resume.empty()) << "--resume: a run with parallel.pp: " << layout.pp
                              << " starts from scratch (its checkpoints hold one stage's optimizer state)";
    dist::DeviceMesh mesh({layout.pp, layout.dp}, {"pp", "dp"});
    layout.stage = mesh.coordinates()[0];
    layout.data_rank = mesh.coordinates()[1];
    layout.pp_group = mesh.group("pp");
    layout.dp_group = mesh.group("dp");
    return layout;
  }
  if (layout.tp == 1) {  // plain data parallelism: DDP over the world, as without `parallel:`
    layout.dp_group = dist::world();
    layout.data_rank = dist::info().rank;
    return layout;
  }
  dist::DeviceMesh mesh({layout.dp, layout.tp}, {"dp", "tp"});
  layout.dp_group = mesh.group("dp");
  layout.tp_group = mesh.group("tp");
  layout.data_rank = mesh.coordinates()[0];
  return layout;
}

void ParallelPlan::wrap(const nn::ModulePtr& net, Device device) {
  // A group carries host tensors by MPI and CUDA ones by NCCL: distributed.backend is refused
  // where the other one is.
  const io::CommBackend backend = config_.distributed.backend;
  DPT_CHECK(backend != io::CommBackend::nccl || device.is_cuda())
      << "distributed.backend: nccl carries CUDA tensors, but this run trains on " << device.str()
      << ": set device: cuda, or distributed.backend: auto or mpi";
  DPT_CHECK(backend != io::CommBackend::mpi || !device.is_cuda())
      << "distributed.backend: mpi carries host tensors, but this run trains on " << device.str()
      << " (dpt moves CUDA tensors through NCCL): set distributed.backend: auto or nccl, or device: cpu";
  net->to(device);  // the whole model, also with pp > 1: evaluation runs it after gather()
  net_ = net;
  module_ = trained_part();
  if (layout_.dp_group->size() == 1) return;
  // DDP over the dp group as the `distributed` keys ask: the one place a run builds DDP.
  // shard_gradients, no key, follows the optimizer: a sharded one needs them reduce-scattered.
  dist::DdpOptions options = config_.distributed.ddp;
  options.shard_gradients = config_.optimizer.shard;
  module_ = std::make_shared<dist::DistributedDataParallel>(module_, layout_.dp_group, options);
}

std::unique_ptr<ParallelPlan> make_plan(const io::Config& config, const ParallelLayout& layout) {
  if (layout.pp > 1) return std::make_unique<PipelinePlan>(config, layout);
  return std::make_unique<DataParallelPlan>(config, layout);
}

}  // namespace dpt::train
