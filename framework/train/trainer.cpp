#include "train/trainer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "comm/dist.h"
#include "comm/flight_recorder.h"
#include "comm/rank_device.h"
#include "comm/world_table.h"
#include "core/threading.h"
#include "datasets/augment.h"
#include "datasets/cifar10.h"
#include "datasets/mnist.h"
#include "datasets/sampler.h"
#include "datasets/synthetic.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/loss_meter.h"
#include "io/safetensors.h"
#include "models/summary.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "parallel/tensor_parallel.h"
#include "parallel/zero.h"

namespace dpt::train {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Threads per rank: the config's, else the CPUs this rank may use (its binding, else an
// even share of the machine).
int compute_threads(int64_t configured) {
  if (configured > 0) return static_cast<int>(configured);
  int available = threads_available();
  int machine = static_cast<int>(std::thread::hardware_concurrency());
  if (available < machine) return available;
  return std::max(1, available / dist::info().local_size);
}

// The training and test sets, checked to fit one model, so that a bad path shows before
// anything is built; synthetic data holds out a test set one sixth the size (as MNIST's 10k/60k).
TrainData load_data(const io::DatasetConfig& c, uint64_t seed) {
  using io::DatasetName;
  TrainData sets;
  if (c.name == DatasetName::fashion_mnist)
    sets = {data::load_fashion_mnist(c.path, true), data::load_fashion_mnist(c.path, false)};
  else if (c.name == DatasetName::mnist)
    sets = {data::load_mnist(c.path, true), data::load_mnist(c.path, false)};
  else if (c.name == DatasetName::cifar10)
    sets = {data::load_cifar10(c.path, true), data::load_cifar10(c.path, false)};
  else
    sets = {data::make_synthetic(c.shape[0], c.shape[1], c.shape[2], c.classes, c.size, seed),
            data::make_synthetic(c.shape[0], c.shape[1], c.shape[2], c.classes,
                                 std::max<int64_t>(c.size / 6, 1), seed + 1)};
  data::dataset_check_split(sets.train, sets.test,
                            io::name_of(c.name) + (c.path.empty() ? "" : " in " + c.path));
  return sets;
}

// `precision` and `channels_last`: what only CUDA does is refused on another device.
nn::Compute compute_for(const io::Config& config, Device device) {
  const bool bf16 = config.precision == io::Precision::bf16;
  nn::Compute compute{bf16 ? DType::bf16 : DType::f32, config.channels_last};
  DPT_CHECK(!compute.active() || device.is_cuda())
      << (bf16 ? "precision: bf16" : "channels_last: true") << " needs a CUDA device, but this run trains on "
      << device.str()
      << " (the CPU kernels are f32 and choose their own layout): set precision: fp32 and channels_last: "
         "false";
  return compute;
}

// What model.safetensors holds: the state with every tensor a tensor-parallel model splits
// gathered whole (loadable into the one-process model). Collective over spec.tp_group.
nn::NamedTensors model_whole_state(const io::Config& config, const models::ModelSpec& spec, nn::Module& net) {
  if (!spec.tp_group || spec.tp_group->size() == 1) return net.state_dict();
  // The unsplit model, for its tensors' shapes.
  YAML::Node node = YAML::Clone(config.model.node);
  node["tensor_parallel"] = false;
  return nn::gather_whole_state(net.state_dict(), models::build_model(node, spec)->state_dict(),
                                *spec.tp_group);
}

// SGD or AdamW in two groups (1-D parameters without weight decay under no_decay_bias_bn);
// with `shard` and `model` a DDP that reduce-scatters, inside a ZeroOptimizer over DDP's
// group (collective; it moves the parameters into DDP's buckets). The state is made beside
// the parameters, so the model must already be where it trains.
std::unique_ptr<optim::Optimizer> make_optimizer(const io::OptimizerConfig& c, nn::Module& model) {
  auto rule = [&c](std::vector<optim::ParamGroup> groups) -> std::unique_ptr<optim::Optimizer> {
    if (c.name == io::OptimizerName::adamw)
      return std::make_unique<optim::AdamW>(
          std::move(groups), optim::AdamWOptions{static_cast<float>(c.betas[0]),
                                                 static_cast<float>(c.betas[1]), static_cast<float>(c.eps)});
    return std::make_unique<optim::Sgd>(std::move(groups),
                                        optim::SgdOptions{static_cast<float>(c.momentum), c.nesterov});
  };
  auto groups = optim::param_groups(model, static_cast<float>(c.weight_decay), c.no_decay_bias_bn);
  auto* ddp = dynamic_cast<dist::DistributedDataParallel*>(&model);
  if (c.shard && ddp) {
    auto zero = std::make_unique<dist::ZeroOptimizer>(*ddp, std::move(groups), rule);
    zero->gather_during_forward();  // where a layer cannot wait for its bucket, step() waits
    return zero;
  }
  return rule(std::move(groups));
}

}  // namespace

// How an epoch's steps went, for its metrics line.
struct Trainer::EpochSteps {
  int exit_code = 0;       // non-zero: the run stops (non-finite gradients, a signal)
  int64_t first_step = 0;  // a resumed epoch starts after its checkpoint's steps
  int64_t step = 0;        // the steps of the epoch done
  int64_t applied = 0;     // of those since first_step, the ones whose update was made
  io::LossMeter losses;    // their losses; on CUDA read back once per log_every steps
};

Trainer::Trainer(io::Config config, TrainerOptions options)
    : config_(std::move(config)), options_(std::move(options)), progress_(config_.epochs, config_.log_every) {
  const dist::InitInfo& world = dist::info();
  const bool main_rank = world.rank == 0;
  // The process: how long a collective may wait, threads, device.
  dist::set_timeout(config_.distributed.timeout_s);
  if (!config_.output.dir.empty()) dist::set_flight_dir(config_.output.dir + "/flight");
  dist::set_debug_collectives(config_.debug == io::DebugMode::collectives);
  dist::set_hierarchical(config_.distributed.hierarchical);
  if (config_.deterministic) threads_set_deterministic();
  threads_set(compute_threads(config_.threads));
  const dist::DeviceChoice where = dist::rank_device_select(config_.device, config_.deterministic);
  device_ = where.device;
  if (main_rank) std::printf("%s\n", where.note.c_str());

  const nn::Compute compute = compute_for(config_, device_);
  layout_ = parallel_layout(config_, options_.resume);
  plan_ = make_plan(config_, layout_);  // before the data and the model: it refuses what it cannot do
  data_ = load_data(config_.dataset, config_.seed);
  spec_ = models::ModelSpec(data_.train.channels, data_.train.height, data_.train.width, data_.train.classes,
                            config_.seed, layout_.tp_group);
  net_ = models::build_model(config_.model.node, spec_);  // the bare model, f32 on the CPU
  global_batch_ = config_.batch_size * layout_.dp;
  // On every rank: counting runs a forward pass, and a tensor-parallel one has collectives.
  const double macs = static_cast<double>(models::macs_per_image(*net_, spec_)) / 1e6;
  if (main_rank)
    std::printf(
        "model %s: %lld parameters, %.1fM multiply-adds per image%s; %d rank(s) x %d threads, global batch "
        "%lld\n",
        config_.model.name.c_str(), static_cast<long long>(net_->parameter_count()), macs,
        layout_.tp_group ? " (rank 0's slice)" : "", world.world_size, threads_get(),
        static_cast<long long>(global_batch_));
  net_->set_compute(compute);  // after the count: its forward runs on the CPU, in f32
  plan_->wrap(net_, device_);
  if (main_rank) std::printf("%s", plan_->describe().c_str());
  if (world.world_size > 1) {  // after DDP made its group, so the table lists it
    const std::string world_text = dist::world_table(device_.str());  // collective
    if (main_rank) std::printf("%s", world_text.c_str());
  }

  make_loaders();

  optimizer_ = make_optimizer(config_.optimizer, plan_->module());
  if (main_rank)
    std::printf("optimizer state: %lld bytes on rank 0%s\n",
                static_cast<long long>(optimizer_->state_bytes()),
                config_.optimizer.shard && layout_.dp > 1 ? " (its shard: optimizer.shard)" : "");
  if (config_.ema_decay > 0)
    ema_ = std::make_unique<optim::Ema>(*net_, static_cast<float>(config_.ema_decay));
  // optimizer.lr, times the dp ranks under `lr_scaling: linear` (the global batch grows).
  const int lr_scale = config_.lr_scaling == io::LrScaling::linear ? layout_.dp : 1;
  schedule_.emplace(static_cast<float>(config_.optimizer.lr) * lr_scale, config_.schedule, steps_,
                    config_.epochs);
  step_ = plan_->make_step(*optimizer_, ema_.get(), data_.train);

  // Checkpoints (resuming from one, saving them) and the output directory.
  control_ =
      std::make_unique<io::RunControl>(config_,
                                       io::TrainingObjects{*net_, config_.model.name, *optimizer_,
                                                           io::name_of(config_.optimizer.name), ema_.get()},
                                       progress_, options_.step_hook);
  control_->resume(options_.resume);
  // What the run leaves for people and tools, written by rank 0, each file replaced whole
  // (io/atomic_file.h): config.yaml (resolved), metrics.jsonl (a line per epoch; a resumed
  // run keeps its finished epochs' lines, a fresh run, at step 0, starts it anew), summary.json.
  if (main_rank) {
    const std::string& dir = config_.output.dir;
    std::filesystem::create_directories(dir);
    if (control_->progress().step == 0) std::filesystem::remove(dir + "/metrics.jsonl");
    io::metrics_keep_epochs(dir + "/metrics.jsonl", control_->progress().epoch);
    io::write_file_atomic(dir + "/config.yaml", {io::config_to_yaml(config_)});
  }

  profiler_ = std::make_unique<profile::StepProfiler>(
      dynamic_cast<const dist::DistributedDataParallel*>(&plan_->module()), options_.timeline);
  if (device_.is_cuda() && (options_.sync_phases || !options_.timeline.path.empty()))
    profiler_->set_phase_sync([device = device_] { device_synchronize(device); });
}

// The training loader (shuffled, augmented when asked, whole batches) and the test loader
// (in order), each behind a BatchSource; and the steps an epoch has. The data is split over
// the dp ranks.
void Trainer::make_loaders() {
  data::LoaderOptions train_options{
      .batch_size = config_.batch_size, .shuffle = true, .drop_last = true, .seed = config_.seed};
  // Only training batches are augmented; each rank draws its own crops and flips.
  if (config_.dataset.augment)
    train_options.transform =
        data::make_augment_transform({}, data_.train.normalization, config_.seed, layout_.data_rank);
  train_batches_ = std::make_unique<BatchSource>(data_.train, std::move(train_options), device_);
  test_batches_ = std::make_unique<BatchSource>(
      data_.test,
      data::LoaderOptions{
          .batch_size = config_.eval_batch_size, .shuffle = false, .drop_last = false, .seed = config_.seed},
      device_);
  const int64_t shard_size = (data_.train.size() + layout_.dp - 1) / layout_.dp;
  steps_ = train_batches_->loader().batch_count(shard_size);
  if (config_.max_steps_per_epoch > 0) steps_ = std::min(steps_, config_.max_steps_per_epoch);
  DPT_CHECK(steps_ > 0) << "batch_size " << config_.batch_size << " is larger than the training set ("
                        << data_.train.size() << " samples)";
}

int Trainer::run() {
  const bool main_rank = dist::info().rank == 0;
  io::TrainingProgress& at = control_->progress();
  const Clock::time_point run_start = Clock::now();
  for (int64_t epoch = at.epoch; epoch < config_.epochs; ++epoch) {
    const Clock::time_point epoch_start = Clock::now();
    EpochSteps done = train_steps(epoch, epoch_start);
    if (done.exit_code != 0) return done.exit_code;
    if (main_rank) progress_.finish_line();
    device_synchronize(device_);  // the epoch's time includes its last steps' GPU work
    const double train_time = seconds_since(epoch_start);
    const int64_t images = (done.step - done.first_step) * global_batch_;
    at.train_time_s += train_time;
    at.train_images += images;
    const double train_loss = control_->epoch_loss(epoch, done.losses.sum(), done.applied);
    optimizer_->parameters_ready();  // the EMA's swap reads them outside forward
    const EvalResult eval = plan_->evaluate(*test_batches_, ema_.get());
    at.final_test_acc = eval.accuracy;
    at.best_test_acc = std::max(at.best_test_acc, eval.accuracy);
    const double images_per_sec = static_cast<double>(images) / train_time;
    const float last_lr = schedule_->lr_at((epoch + 1) * steps_ - 1);
    const profile::StepPhases phases = profiler_->take_epoch_means();  // collective
    const std::string step_lines = step_->epoch_lines();               // collective
    if (main_rank) {
      std::printf("epoch %lld: train_loss %.4f  test_loss %.4f  test_acc %.4f  %.0f img/s\n",
                  static_cast<long long>(epoch + 1), train_loss, eval.loss, eval.accuracy, images_per_sec);
      std::printf("%s", step_lines.c_str());
      std::fflush(stdout);
      // elapsed_s: since the run (or its resumption) started; lr: the epoch's last step's;
      // then the phases' means per step over the ranks.
      io::JsonOut line = {{"epoch", epoch + 1},
                          {"train_loss", train_loss},
                          {"test_loss", eval.loss},
                          {"test_acc", eval.accuracy},
                          {"images_per_sec", images_per_sec},
                          {"epoch_time_s", seconds_since(epoch_start)},
                          {"elapsed_s", seconds_since(run_start)},
                          {"lr", last_lr}};
      io::append_line(config_.output.dir + "/metrics.jsonl",
                      io::json_text(io::json_rounded(phases.add_to(line))));
    }
    control_->epoch_end(epoch, last_lr);  // after the metrics line
  }
  return finish(run_start);
}

Trainer::EpochSteps Trainer::train_steps(int64_t epoch, Clock::time_point epoch_start) {
  const dist::InitInfo& world = dist::info();
  EpochSteps r;
  // A resumed epoch goes on after the samples its checkpoint had trained on.
  const int64_t done = control_->samples_done(epoch);
  r.first_step = r.step = done / global_batch_;
  train_batches_->start_epoch(data::train_shard_rest(data_.train.size(), config_.seed, epoch,
                                                     layout_.data_rank, layout_.dp, true, done),
                              epoch, r.first_step);
  data::Batch batch;
  double shown_loss = 0;
  profiler_->start_epoch();
  while (r.step < steps_ && train_batches_->next(batch)) {
    profiler_->lap(profile::Phase::data);
    control_->before_forward();
    const float lr = schedule_->lr_at(epoch * steps_ + r.step);
    ++r.step;
    const io::RunControl::StepAction action =
        step_->run(batch, lr, {epoch, r.step, steps_}, {*control_, *profiler_, r.losses});
    if (action == io::RunControl::StepAction::stop) {
      r.exit_code = 3;
      return r;
    }
    if (action == io::RunControl::StepAction::apply) ++r.applied;
    if (world.rank == 0) {
      const double elapsed = seconds_since(epoch_start);
      const double rate = static_cast<double>((r.step - r.first_step) * global_batch_) / elapsed;
      const double eta = elapsed / static_cast<double>(r.step - r.first_step) *
                         static_cast<double>(steps_ * (config_.epochs - epoch) - r.step);
      if (device_.is_cpu() || r.step % config_.log_every == 0 || r.step == steps_)
        shown_loss = r.losses.sum() / static_cast<double>(std::max<int64_t>(r.applied, 1));
      progress_.update(epoch + 1, r.step, steps_, shown_loss, rate, eta);
    }
    if (r.step % config_.log_every == 0) {
      const std::vector<std::string> stragglers = profiler_->straggler_report();  // collective
      if (!stragglers.empty()) progress_.finish_line();
      for (const std::string& line : stragglers) std::printf("%s\n", line.c_str());
    }
    // Called on every rank only when a signal stops the run: the plan gathers the model
    // first, so that rank 0's checkpoint holds its whole weights.
    auto loss_sum = [&] {
      plan_->gather();
      return r.losses.sum();
    };
    if (int signal = control_->stop_requested(epoch, r.step, lr, loss_sum, r.applied)) {
      r.exit_code = 128 + signal;
      return r;
    }
  }
  return r;
}

int Trainer::finish(Clock::time_point run_start) {
  const dist::InitInfo& world = dist::info();
  const io::TrainingProgress& at = control_->progress();
  const profile::StepPhases phases = profiler_->run_means();  // collective
  profiler_->write_timeline();                                // collective
  io::JsonOut ranks = profiler_->straggler_run_report();      // collective
  // The whole model, gathered from the tp ranks' slices: what one process would have trained.
  optimizer_->parameters_ready();
  const nn::NamedTensors state = model_whole_state(config_, spec_, *net_);
  if (world.rank != 0) return 0;
  io::safetensors_write(config_.output.dir + "/model.safetensors", state, {{"format", "pt"}});
  const profile::StepTraffic traffic = profiler_->run_traffic();
  io::JsonOut summary = {{"final_test_acc", at.final_test_acc},
                         {"best_test_acc", at.best_test_acc},
                         {"total_time_s", seconds_since(run_start)},
                         {"images_per_sec", static_cast<double>(at.train_images) / at.train_time_s},
                         {"world_size", world.world_size},
                         {"global_batch", global_batch_},
                         {"model", config_.model.name},
                         {"params", plan_->module().parameter_count()},
                         {"skipped_steps", at.skipped_steps},
                         {"optimizer_state_bytes", optimizer_->state_bytes()},  // rank 0's shard
                         {"device", device_.str()},
                         {"collectives_per_step", traffic.collectives},
                         {"bytes_per_step", traffic.bytes}};
  if (!ranks.is_null()) summary.update(ranks);
  io::write_file_atomic(config_.output.dir + "/summary.json",
                        {io::json_text(io::json_rounded(phases.add_to(summary)), 2) + "\n"});
  std::printf("done: final test_acc %.4f, best %.4f; metrics in %s\n", at.final_test_acc, at.best_test_acc,
              config_.output.dir.c_str());
  return 0;
}

}  // namespace dpt::train
