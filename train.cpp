// train: the entry point. config -> MPI -> data -> model (DDP when several ranks) ->
// optimizer -> epochs of train and evaluate -> metrics.jsonl and summary.json (rank 0).
// Any dpt::Error ends the run with one line on stderr and exit code 2; on several ranks
// it ends every rank (MPI_Abort), so no rank waits forever on one that died. Checkpoints,
// --resume, SIGTERM/SIGINT (exit 128 + signal) and non-finite gradients (exit 3): io/run_control.h.
//
//   mpirun -np 2 build/train configs/default.yaml [--set key=value ...] [--resume PATH|auto]
//     [--timeline trace.json] [--sync-phases]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <thread>

#include "autograd/node.h"
#include "core/threading.h"
#include "datasets/augment.h"
#include "datasets/cifar10.h"
#include "datasets/loader.h"
#include "datasets/sampler.h"
#include "distributed/ddp.h"
#include "distributed/dist.h"
#include "distributed/rank_device.h"
#include "datasets/mnist.h"
#include "datasets/synthetic.h"
#include "io/atomic_file.h"
#include "io/config.h"
#include "io/json.h"
#include "io/loss_meter.h"
#include "io/progress.h"
#include "io/run_control.h"
#include "io/safetensors.h"
#include "io/stop_signal.h"
#include "models/registry.h"
#include "models/summary.h"
#include "ops/loss.h"
#include "optim/adamw.h"
#include "optim/ema.h"
#include "optim/graphed_train_step.h"
#include "optim/schedule.h"
#include "optim/sgd.h"
#include "profile/step_profiler.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/batch_upload.h"
#include "backend/cuda/eval_totals.h"
#endif

using namespace dpt;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Data {
  data::Dataset train, test;
};

Data load_data(const io::DatasetConfig& c, uint64_t seed) {
  using io::DatasetName;
  if (c.name == DatasetName::fashion_mnist)
    return {data::load_fashion_mnist(c.path, true), data::load_fashion_mnist(c.path, false)};
  if (c.name == DatasetName::mnist) return {data::load_mnist(c.path, true), data::load_mnist(c.path, false)};
  if (c.name == DatasetName::cifar10)
    return {data::load_cifar10(c.path, true), data::load_cifar10(c.path, false)};
  // synthetic: a held-out set one sixth the size, as MNIST's 10k/60k.
  return {data::make_synthetic(c.shape[0], c.shape[1], c.shape[2], c.classes, c.size, seed),
          data::make_synthetic(c.shape[0], c.shape[1], c.shape[2], c.classes, std::max<int64_t>(c.size / 6, 1),
                               seed + 1)};
}

std::unique_ptr<optim::Optimizer> make_optimizer(const io::OptimizerConfig& c, const nn::Module& model) {
  auto groups = optim::param_groups(model, static_cast<float>(c.weight_decay), c.no_decay_bias_bn);
  if (c.name == io::OptimizerName::adamw)
    return std::make_unique<optim::AdamW>(
        groups, optim::AdamWOptions{static_cast<float>(c.betas[0]), static_cast<float>(c.betas[1]),
                                    static_cast<float>(c.eps)});
  return std::make_unique<optim::Sgd>(groups, optim::SgdOptions{static_cast<float>(c.momentum), c.nesterov});
}

optim::ScheduleOptions schedule_options(const io::ScheduleConfig& c) {
  optim::ScheduleOptions s;
  s.kind = c.name;
  s.warmup_epochs = static_cast<double>(c.warmup_epochs);
  s.milestones = c.milestones;
  s.gamma = static_cast<float>(c.gamma);
  s.min_lr = static_cast<float>(c.min_lr);
  return s;
}

struct EvalResult {
  double loss = 0, accuracy = 0;
};

// Sums values over all ranks (a no-op on one).
std::vector<float> sum_over_ranks(std::vector<float> values) {
  Tensor t = Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
  if (dist::info().world_size > 1) dist::world()->all_reduce(t, dist::ReduceOp::sum)->wait();
  return t.to_vector();
}

// A loop's batches: the loader's own on the CPU; on CUDA copied to the device ahead of use
// (backend/cuda/batch_upload.h), so that batch i+1's copy overlaps step i.
class BatchSource {
 public:
  BatchSource(data::Loader& loader, Device device) : loader_(loader) {
#ifdef DPT_WITH_CUDA
    if (device.is_cuda()) uploader_ = std::make_unique<cuda::BatchUploader>(device.index);
#endif
  }
  data::Loader& loader() { return loader_; }
  // After loader().start_epoch(): forgets a batch copied ahead that the last epoch did not use.
  void restart() {
#ifdef DPT_WITH_CUDA
    if (uploader_) uploader_->drop();
#endif
  }
  bool next(data::Batch& batch) {
#ifdef DPT_WITH_CUDA
    if (uploader_) {
      if (!uploader_->pending() && !upload_next()) return false;
      std::vector<Tensor> tensors = uploader_->take();
      batch = {tensors[0], tensors[1]};
      upload_next();
      return true;
    }
#endif
    return loader_.next(batch);
  }

 private:
#ifdef DPT_WITH_CUDA
  bool upload_next() {
    data::Batch host;
    if (!loader_.next(host)) return false;
    uploader_->start({host.images, host.labels});
    return true;
  }
  std::unique_ptr<cuda::BatchUploader> uploader_;
#endif
  data::Loader& loader_;
};

#ifdef DPT_WITH_CUDA
// Evaluation's totals (loss x samples, correct, samples) kept on the device, all-reduced
// there (NCCL, through the world group's forwarding) and read back once.
std::vector<float> device_eval_totals(nn::Module& model, BatchSource& source, Device device) {
  // The all-reduced counts cover the whole test set (the ranks' shards partition it), and
  // every rank decides alike, before any collective.
  const int64_t samples = source.loader().dataset().size();
  DPT_CHECK(samples < (int64_t{1} << 24))
      << "evaluation: " << samples << " test samples; counts on the GPU are exact below 2^24";
  Tensor totals = Tensor::zeros({3}, DType::f32, device);
  data::Batch batch;
  while (source.next(batch)) {
    Tensor logits = model(batch.images);
    cuda::eval_totals_add(totals, cross_entropy(logits, batch.labels), logits, batch.labels);
  }
  if (dist::info().world_size > 1) dist::world()->all_reduce(totals, dist::ReduceOp::sum)->wait();
  return totals.to_vector();
}
#endif

// Each rank evaluates its shard of the test set; the totals are summed over ranks.
EvalResult evaluate(nn::Module& model, BatchSource& source, Device device) {
  autograd::NoGrad no_grad;
  model.eval();
  const dist::InitInfo& world = dist::info();
  data::Loader& loader = source.loader();
  loader.start_epoch(data::eval_shard(loader.dataset().size(), world.rank, world.world_size));
  source.restart();
  std::vector<float> totals;
#ifdef DPT_WITH_CUDA
  if (device.is_cuda()) totals = device_eval_totals(model, source, device);
#endif
  if (device.is_cpu()) {
    data::Batch batch;
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    while (source.next(batch)) {
      Tensor logits = model(batch.images);
      int64_t n = batch.labels.numel();
      loss_sum += cross_entropy(logits, batch.labels).item() * static_cast<double>(n);
      correct += count_correct(logits, batch.labels);
      seen += n;
    }
    totals =
        sum_over_ranks({static_cast<float>(loss_sum), static_cast<float>(correct), static_cast<float>(seen)});
  }
  model.train();
  return {totals[0] / totals[2], totals[1] / totals[2]};
}

// Threads per rank: the config's, else the CPUs this rank may use — all of them when
// the launcher bound it to its share, else an even share of the machine.
int compute_threads(int64_t configured) {
  if (configured > 0) return static_cast<int>(configured);
  int available = threads_available();
  int machine = static_cast<int>(std::thread::hardware_concurrency());
  if (available < machine) return available;
  return std::max(1, available / dist::info().local_size);
}

// cuda_graphs: the whole step as one captured CUDA graph (optim/graphed_train_step.h);
// null without the key. The model must already be on its CUDA device.
std::unique_ptr<optim::GraphedTrainStep> make_graphed_step(const io::Config& config, nn::Module& model,
                                                           const nn::Module& net, optim::Optimizer& optimizer,
                                                           optim::Ema* ema, const data::Dataset& train) {
  if (!config.cuda_graphs) return nullptr;
  const Device device = net.parameters().front().device();
  DPT_CHECK(device.is_cuda()) << "cuda_graphs: true needs training on a CUDA device, but rank " << dist::info().rank
                              << " trains on " << device.str();
  return std::make_unique<optim::GraphedTrainStep>(
      model, net, optimizer, ema, Shape{config.batch_size, train.channels, train.height, train.width},
      optim::GraphedTrainOptions{.label_smoothing = static_cast<float>(config.label_smoothing),
                                 .classes = train.classes,
                                 .check_loss = dist::info().world_size == 1});
}

// The `precision` and `channels_last` keys as nn::Compute for a model that trains on
// `device`; Error (exit 2) when they ask for what only CUDA does and the device is not CUDA.
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

int run(const io::Config& config, const std::string& resume, const profile::TimelineOptions& timeline,
        bool sync_phases) {
  const dist::InitInfo& world = dist::info();
  const bool main_rank = world.rank == 0;
  dist::set_timeout(config.distributed.timeout_s);
  dist::set_debug_collectives(config.debug == io::DebugMode::collectives);
  if (config.deterministic) threads_set_deterministic();
  threads_set(compute_threads(config.threads));
  const dist::DeviceChoice where = dist::rank_device_select(config.device, config.deterministic);
  const Device device = where.device;
  if (main_rank) std::printf("%s\n", where.note.c_str());
  const nn::Compute compute = compute_for(config, device);
  Data data = load_data(config.dataset, config.seed);
  data::dataset_check_split(
      data.train, data.test,
      io::name_of(config.dataset.name) + (config.dataset.path.empty() ? "" : " in " + config.dataset.path));
  models::ModelSpec spec{data.train.channels, data.train.height, data.train.width, data.train.classes, config.seed};
  nn::ModulePtr model = models::build_model(config.model.node, spec);
  model->set_compute(compute);
  const nn::ModulePtr net = model;  // without DDP: what checkpoints hold
  if (main_rank)
    std::printf("model %s: %lld parameters, %.1fM multiply-adds per image; %d rank(s) x %d threads, global batch %lld\n",
                config.model.name.c_str(), static_cast<long long>(model->parameter_count()),
                static_cast<double>(models::macs_per_image(*model, spec)) / 1e6, world.world_size, threads_get(),
                static_cast<long long>(config.batch_size * world.world_size));
  // Before DDP (which broadcasts rank 0's tensors), the optimizer and the EMA (whose
  // state is made where the parameters are) and the checkpoint (loaded into them).
  model->to(device);
  if (world.world_size > 1) {
    const io::DistributedConfig& d = config.distributed;
    model = std::make_shared<dist::DistributedDataParallel>(
        model, dist::world(),
        dist::DdpOptions{.bucket_cap_mb = d.bucket_cap_mb, .find_unused_parameters = d.find_unused_parameters,
                         .sync_bn = d.sync_bn});
  }

  data::LoaderOptions train_options{.batch_size = config.batch_size, .shuffle = true, .drop_last = true,
                                    .seed = config.seed};
  // Only training batches are augmented; each rank draws its own crops and flips.
  if (config.dataset.augment)
    train_options.transform = data::make_augment_transform({}, data.train.normalization, config.seed, world.rank);
  data::Loader train_loader(data.train, std::move(train_options));
  data::Loader test_loader(data.test, {.batch_size = config.eval_batch_size, .shuffle = false, .drop_last = false,
                                       .seed = config.seed});
  BatchSource train_batches(train_loader, device), test_batches(test_loader, device);
  int64_t shard_size = (data.train.size() + world.world_size - 1) / world.world_size;
  int64_t steps = train_loader.batch_count(shard_size);
  if (config.max_steps_per_epoch > 0) steps = std::min(steps, config.max_steps_per_epoch);
  DPT_CHECK(steps > 0) << "batch_size " << config.batch_size << " is larger than the training set ("
                       << data.train.size() << " samples)";
  auto optimizer = make_optimizer(config.optimizer, *model);
  std::unique_ptr<optim::Ema> ema;
  if (config.ema_decay > 0) ema = std::make_unique<optim::Ema>(*net, static_cast<float>(config.ema_decay));
  float lr = static_cast<float>(config.optimizer.lr) *
             (config.lr_scaling == io::LrScaling::linear ? world.world_size : 1);
  optim::LrSchedule schedule(lr, schedule_options(config.schedule), steps, config.epochs);
  auto graphed = make_graphed_step(config, *model, *net, *optimizer, ema.get(), data.train);

  io::Progress progress(config.epochs, config.log_every);
  io::RunControl control(
      config, {*net, config.model.name, *optimizer, io::name_of(config.optimizer.name), ema.get()}, progress);
  control.resume(resume);
  io::TrainingProgress& at = control.progress();
  std::string metrics_path = config.output.dir + "/metrics.jsonl";
  if (main_rank) {
    std::filesystem::create_directories(config.output.dir);
    if (!control.resumed()) std::filesystem::remove(metrics_path);
    io::metrics_keep_epochs(metrics_path, at.epoch);
    io::write_file_atomic(config.output.dir + "/config.yaml", {io::config_to_yaml(config)});
  }

  profile::StepProfiler profiler(dynamic_cast<const dist::DistributedDataParallel*>(model.get()), timeline);
  if (device.is_cuda() && (sync_phases || !timeline.path.empty()))
    profiler.set_phase_sync([device] { device_synchronize(device); });
  const int64_t global_batch = config.batch_size * world.world_size;
  double &best_acc = at.best_test_acc, &final_acc = at.final_test_acc, &train_time = at.train_time_s;
  int64_t& train_images = at.train_images;
  auto run_start = Clock::now();
  for (int64_t epoch = at.epoch; epoch < config.epochs; ++epoch) {
    auto epoch_start = Clock::now();
    // A resumed epoch goes on after the samples its checkpoint had trained on.
    const int64_t done = control.samples_done(epoch), first_step = done / global_batch;
    train_loader.start_epoch(
        data::train_shard_rest(data.train.size(), config.seed, epoch, world.rank, world.world_size, true, done), epoch,
        first_step);
    train_batches.restart();
    data::Batch batch;
    io::LossMeter losses;  // on CUDA read back once per log_every steps
    double shown_loss = 0;
    int64_t step = first_step, applied = 0;
    profiler.start_epoch();
    while (step < steps && train_batches.next(batch)) {
      profiler.lap(profile::Phase::data);
      control.before_forward();
      const float step_lr = schedule.lr_at(epoch * steps + step);
      if (graphed) {  // forward, backward and update in one replay, timed as forward
        optim::GraphedStepResult r = graphed->run(batch.images, batch.labels, step_lr);
        profiler.lap(profile::Phase::forward);
        ++step;
        if (control.after_backward(r.finite, r.loss, epoch, step, steps) == io::RunControl::StepAction::stop)
          return 3;
        losses.add(r.loss);
        ++applied;
        profiler.lap(profile::Phase::optimizer);  // ends the step's record
      } else {
        Tensor loss = control.loss_hook(
            cross_entropy((*model)(batch.images), batch.labels, static_cast<float>(config.label_smoothing)));
        profiler.lap(profile::Phase::forward);
        optimizer->zero_grad();
        loss.backward();
        profiler.lap(profile::Phase::backward);
        ++step;
        const io::RunControl::StepAction action = control.after_backward(loss, epoch, step, steps);
        if (action == io::RunControl::StepAction::stop) return 3;
        if (action == io::RunControl::StepAction::apply) {
          optimizer->step(step_lr);
          if (ema) ema->update(*net);
          losses.add(loss);
          ++applied;
        }
        profiler.lap(profile::Phase::optimizer);
      }
      double elapsed = seconds_since(epoch_start);
      if (main_rank) {
        double rate = static_cast<double>((step - first_step) * global_batch) / elapsed;
        double eta = elapsed / static_cast<double>(step - first_step) *
                     static_cast<double>(steps * (config.epochs - epoch) - step);
        if (device.is_cpu() || step % config.log_every == 0 || step == steps)
          shown_loss = losses.sum() / static_cast<double>(std::max<int64_t>(applied, 1));
        progress.update(epoch + 1, step, steps, shown_loss, rate, eta);
      }
      if (int signal = control.stop_requested(
              epoch, step, step_lr, [&] { return losses.sum(); }, applied))
        return 128 + signal;
    }
    if (main_rank) progress.finish_line();
    device_synchronize(device);  // the epoch's time includes its last steps' GPU work
    double epoch_train_time = seconds_since(epoch_start);
    train_time += epoch_train_time;
    train_images += (step - first_step) * global_batch;
    double train_loss = control.epoch_loss(epoch, losses.sum(), applied);
    EvalResult eval;
    if (ema) {
      optim::Ema::Swap averaged(*ema, *net);
      eval = evaluate(*model, test_batches, device);
    } else {
      eval = evaluate(*model, test_batches, device);
    }
    final_acc = eval.accuracy;
    best_acc = std::max(best_acc, eval.accuracy);
    double images_per_sec = static_cast<double>((step - first_step) * global_batch) / epoch_train_time;
    profile::StepPhases phases = profiler.take_epoch_means();
    if (main_rank) {
      std::printf("epoch %lld: train_loss %.4f  test_loss %.4f  test_acc %.4f  %.0f img/s\n",
                  static_cast<long long>(epoch + 1), train_loss, eval.loss, eval.accuracy, images_per_sec);
      std::fflush(stdout);
      io::JsonOut line = {{"epoch", epoch + 1},
                          {"train_loss", train_loss},
                          {"test_loss", eval.loss},
                          {"test_acc", eval.accuracy},
                          {"images_per_sec", images_per_sec},
                          {"epoch_time_s", seconds_since(epoch_start)},
                          {"elapsed_s", seconds_since(run_start)},
                          {"lr", schedule.lr_at((epoch + 1) * steps - 1)}};
      io::append_line(metrics_path, io::json_text(io::json_rounded(phases.add_to(line))));
    }
    control.epoch_end(epoch, schedule.lr_at((epoch + 1) * steps - 1));  // after the metrics line
  }
  profile::StepPhases phases = profiler.run_means();
  profiler.write_timeline();
  if (!main_rank) return 0;
  io::safetensors_write(config.output.dir + "/model.safetensors", net->state_dict(), {{"format", "pt"}});
  io::JsonOut summary = {{"final_test_acc", final_acc},
                         {"best_test_acc", best_acc},
                         {"total_time_s", seconds_since(run_start)},
                         {"images_per_sec", static_cast<double>(train_images) / train_time},
                         {"world_size", world.world_size},
                         {"global_batch", global_batch},
                         {"model", config.model.name},
                         {"params", model->parameter_count()},
                         {"skipped_steps", at.skipped_steps},
                         {"device", device.str()}};
  io::write_file_atomic(config.output.dir + "/summary.json",
                        {io::json_text(io::json_rounded(phases.add_to(summary)), 2) + "\n"});
  std::printf("done: final test_acc %.4f, best %.4f; metrics in %s\n", final_acc, best_acc, config.output.dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "train CONFIG.yaml [--set key=value ...] [--resume PATH|auto] [--timeline TRACE.json [--timeline-steps "
      "N]] "
      "[--sync-phases]";
  std::string config_path;
  std::vector<std::string> overrides;
  std::string resume;
  profile::TimelineOptions timeline;
  bool sync_phases = false;  // on a GPU: wait for it at each phase boundary, so phases time its work
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf("usage: %s\n", usage);
      return 0;
    } else if (arg == "--resume" && i + 1 < argc) {
      resume = argv[++i];
    } else if (arg.rfind("--resume=", 0) == 0) {
      resume = arg.substr(9);
    } else if (arg == "--sync-phases") {
      sync_phases = true;
    } else if (arg == "--timeline" && i + 1 < argc) {
      timeline.path = argv[++i];
    } else if (arg == "--timeline-steps" && i + 1 < argc) {
      char* end = nullptr;
      timeline.steps = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || timeline.steps < 1) {
        std::fprintf(stderr, "error: --timeline-steps expects a whole number >= 1, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (arg == "--set" && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else if (arg.rfind("--set=", 0) == 0) {
      overrides.push_back(arg.substr(6));
    } else if (config_path.empty() && arg[0] != '-') {
      config_path = arg;
    } else {
      std::fprintf(stderr, "error: unexpected argument '%s' (usage: %s)\n", arg.c_str(), usage);
      return 2;
    }
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "error: no config file (usage: %s)\n", usage);
    return 2;
  }
  int code = 0;
  std::string message;
  bool failed = false;  // an exception is this rank's alone; run()'s exit codes are every rank's
  io::stop_signals_install();
  try {
    dist::init();
    code = run(io::load_config(config_path, overrides), resume, timeline, sync_phases);
  } catch (const Error& e) {
    code = 2;
    message = e.what();
    failed = true;
  } catch (const std::exception& e) {
    code = 1;
    message = e.what();
    failed = true;
  }
  std::fflush(stdout);
  if (failed && dist::initialized() && dist::info().world_size > 1) dist::abort_all("error: " + message, code);
  if (failed) std::fprintf(stderr, "error: %s\n", message.c_str());
  dist::finalize();
  return code;
}
