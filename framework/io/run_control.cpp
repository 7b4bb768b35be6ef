#include "io/run_control.h"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <tuple>
#include <utility>

#include "comm/dist.h"
#include "core/threading.h"

namespace dpt::io {
namespace {

// The signal this process has received (SIGTERM, SIGINT or SIGUSR1), 0 if none. The handler
// writes it and nothing else (async-signal-safe); SA_RESETHAND restores the default action,
// so a second signal is not ignored.
volatile std::sig_atomic_t g_signal = 0;  // a signal handler can reach nothing else

extern "C" void on_stop_signal(int signal) { g_signal = signal; }

double sum_over_ranks(double value) {
  if (dist::info().world_size == 1) return value;
  Tensor t = Tensor::full({1}, static_cast<float>(value));
  dist::world()->all_reduce(t, dist::ReduceOp::sum)->wait();
  return t.item();
}

void barrier() {
  if (dist::info().world_size > 1) dist::world()->barrier()->wait();
}

// Rank 0's `make()` on every rank: what it returns, or the Error it throws, thrown on every
// rank alike. On a cluster the output directory may be on rank 0's host only, so rank 0's
// filesystem decides where a run resumes from, and its bytes are what every rank loads.
std::string from_rank0(const std::function<std::string()>& make) {
  if (dist::info().world_size == 1) return make();
  std::string text;
  int64_t failed = 0;
  if (dist::info().rank == 0) {
    try {
      text = make();
    } catch (const Error& e) {
      text = e.what();
      failed = 1;
    }
  }
  Tensor head = Tensor::from_vector(std::vector<int64_t>{failed, static_cast<int64_t>(text.size())}, {2});
  dist::world()->broadcast(head, 0)->wait();
  failed = head.data<int64_t>()[0];
  const int64_t bytes = head.data<int64_t>()[1];
  Tensor body = Tensor::zeros({(bytes + 7) / 8}, DType::i64);  // the bytes, 8 to an element
  if (dist::info().rank == 0) std::memcpy(body.raw_data(), text.data(), text.size());
  dist::world()->broadcast(body, 0)->wait();
  text.assign(static_cast<const char*>(body.raw_data()), static_cast<size_t>(bytes));
  if (failed) throw Error(text);
  return text;
}

std::string last_checkpoint(const std::string& dir) {
  const std::string newest = checkpoint_resolve("auto", dir);
  return newest.empty() ? "none (no checkpoint written yet)" : newest;
}

}  // namespace

void stop_signals_install() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
  std::signal(SIGXFSZ, SIG_IGN);
}

RunControl::RunControl(const Config& config, const TrainingObjects& objects, Progress& progress,
                       StepHook hook)
    : config_(config),
      objects_(objects),
      progress_(progress),
      dir_(config.output.dir + "/checkpoints"),
      hook_(std::move(hook)),
      guard_(objects.model, objects.optimizer, config.on_nonfinite == NonfiniteAction::skip,
             dist::info().world_size == 1) {}

void RunControl::resume(const std::string& arg) {
  const bool main_rank = dist::info().rank == 0;
  const std::string path = from_rank0([&] { return choose_checkpoint(arg); });
  if (path.empty()) {
    if (!arg.empty() && main_rank)
      std::printf("--resume %s: no checkpoint in %s, starting from scratch\n", arg.c_str(), dir_.c_str());
    return;
  }
  const CheckpointInfo info = checkpoint_load(path, objects_, [](const std::string& file) {
                                return from_rank0([&] { return read_file(file); });
                              }).info;
  at_ = info.progress;
  // Results depend on the thread count (how oneDNN splits its sums): a deterministic run
  // left to choose takes the checkpoint's.
  const bool pin_threads = config_.deterministic && config_.threads == 0 && info.threads != threads_get();
  if (pin_threads) threads_set(info.threads);
  if (!main_rank) return;
  if (pin_threads)
    std::printf("deterministic: %d threads per rank, as in the checkpoint's run\n", info.threads);
  std::printf("resumed from %s: step %lld, epoch %lld, step %lld of the epoch\n", path.c_str(),
              static_cast<long long>(at_.step), static_cast<long long>(at_.epoch + 1),
              static_cast<long long>(at_.step_in_epoch));
  const int world_size = dist::info().world_size;
  if (info.world_size != world_size || info.batch_size != config_.batch_size)
    std::printf(
        "resumed with %d rank(s) x batch %lld; the checkpoint had %d x %lld: the data order follows the new "
        "world size\n",
        world_size, static_cast<long long>(config_.batch_size), info.world_size,
        static_cast<long long>(info.batch_size));
  if (config_.deterministic && info.threads != threads_get())
    std::printf(
        "note: %d threads per rank, the checkpoint's run had %d: not bit for bit the same as that run\n",
        threads_get(), info.threads);
}

std::string RunControl::choose_checkpoint(const std::string& arg) {
  // A fresh run's checkpoints must not mix with an earlier run's (--resume auto would
  // pick theirs). Those of a run that finished (it wrote summary.json) are replaced; those
  // of an interrupted one are kept, since deleting them on a forgotten flag would lose days
  // of training.
  const std::vector<int64_t> earlier = checkpoint_steps(dir_);
  const std::string summary = config_.output.dir + "/summary.json";
  DPT_CHECK(!arg.empty() || earlier.empty() || std::filesystem::exists(summary))
      << dir_ << " holds checkpoints of an interrupted earlier run (the newest is step-" << earlier.back()
      << ".json): continue it with --resume auto, or start over after removing them or with another "
         "output.dir";
  if (!arg.empty()) return checkpoint_resolve(arg, dir_);
  if (!earlier.empty()) {
    std::filesystem::remove_all(dir_);
    std::printf("starting afresh: removed the checkpoints of the finished earlier run in %s\n", dir_.c_str());
  }
  std::filesystem::remove(summary);  // written again when this run finishes
  return "";
}

void RunControl::before_forward() {
  if (hook_.before_step) hook_.before_step(at_.step + 1);  // a signal it sends counts in this step's vote
  guard_.before_forward();
  if (dist::info().world_size == 1) return;
  stop_signal_ = Tensor::from_vector(std::vector<int64_t>{g_signal}, {1});
  stop_vote_ = dist::world()->all_reduce(stop_signal_, dist::ReduceOp::max);
}

Tensor RunControl::loss_hook(const Tensor& loss) const {
  return hook_.loss ? hook_.loss(at_.step + 1, loss) : loss;
}

RunControl::StepAction RunControl::after_backward(const Tensor& loss, int64_t epoch, int64_t step_in_epoch,
                                                  int64_t steps) {
  // Every rank decides the same: the all-reduced gradients are the same everywhere, and a
  // sharded optimizer's ranks combine their verdicts. The loss is read only to report it.
  const bool finite = guard_.step_finite(loss);
  return after_backward(finite, finite ? 0.0f : loss.item(), epoch, step_in_epoch, steps);
}

RunControl::StepAction RunControl::after_backward(bool finite, float loss, int64_t epoch,
                                                  int64_t step_in_epoch, int64_t steps) {
  ++at_.step;
  if (finite) return StepAction::apply;
  const bool skip = config_.on_nonfinite == NonfiniteAction::skip;
  if (dist::info().rank == 0) {
    progress_.finish_line();
    std::fprintf(
        stderr,
        "%s: step %lld (epoch %lld, step %lld of %lld): non-finite gradients (NaN or Inf; rank 0's "
        "loss %g); %s\n",
        skip ? "warning" : "error", static_cast<long long>(at_.step), static_cast<long long>(epoch + 1),
        static_cast<long long>(step_in_epoch), static_cast<long long>(steps), loss,
        skip ? "step skipped" : ("stopped, the last good checkpoint is " + last_checkpoint(dir_)).c_str());
  }
  if (skip) {
    ++at_.skipped_steps;
    return StepAction::skip;
  }
  barrier();
  return StepAction::stop;
}

int RunControl::stop_requested(int64_t epoch, int64_t step_in_epoch, float lr,
                               const std::function<double()>& loss_sum, int64_t applied) {
  int signal = g_signal;
  if (dist::info().world_size > 1) {
    DPT_CHECK(stop_vote_) << "RunControl: stop_requested without the vote before_forward starts";
    std::exchange(stop_vote_, nullptr)->wait();
    signal = static_cast<int>(stop_signal_.data<int64_t>()[0]);
  }
  if (signal == 0) return 0;
  std::tie(at_.epoch_loss_sum, at_.epoch_steps_applied) = epoch_totals(epoch, loss_sum(), applied);
  move_to(epoch, step_in_epoch);
  if (dist::info().rank == 0) {
    progress_.finish_line();
    std::printf("signal %d: stopping after step %lld\n", signal, static_cast<long long>(at_.step));
  }
  save(lr);
  barrier();  // no rank exits (and has mpirun end the others) before the checkpoint is written
  return signal;
}

std::pair<double, int64_t> RunControl::epoch_totals(int64_t epoch, double loss_sum, int64_t applied) const {
  const bool carried = epoch == at_.epoch;
  return {(carried ? at_.epoch_loss_sum : 0) + sum_over_ranks(loss_sum) / dist::info().world_size,
          (carried ? at_.epoch_steps_applied : 0) + applied};
}

double RunControl::epoch_loss(int64_t epoch, double loss_sum, int64_t applied) const {
  const auto [sum, steps] = epoch_totals(epoch, loss_sum, applied);
  return sum / static_cast<double>(steps);
}

void RunControl::epoch_end(int64_t epoch, float lr) {
  move_to(epoch + 1, 0);
  const int64_t every = config_.checkpoint.every_epochs;
  if (every > 0 && (epoch + 1) % every == 0) save(lr);
}

void RunControl::move_to(int64_t epoch, int64_t step_in_epoch) {
  at_.epoch = epoch;
  at_.step_in_epoch = step_in_epoch;
  at_.samples_in_epoch = step_in_epoch * config_.batch_size * dist::info().world_size;
  if (step_in_epoch == 0) {
    at_.epoch_loss_sum = 0;
    at_.epoch_steps_applied = 0;
  }
}

void RunControl::save(float lr) {
  // A checkpoint holds rank 0's model, and a tensor-parallel rank holds a slice of it
  // (train/parallel_plan.h refuses every_epochs and --resume there; this covers a signal).
  if (config_.parallel.tp > 1) {
    std::printf("no checkpoint: a tensor-parallel run (parallel.tp %lld) writes none\n",
                static_cast<long long>(config_.parallel.tp));
    std::fflush(stdout);
    return;
  }
  // On every rank: a sharded optimizer gathers its state to rank 0 here.
  const std::vector<optim::Optimizer::StateTensor> state = objects_.optimizer.state_for_save();
  if (dist::info().rank != 0) return;
  CheckpointInfo info{at_, dist::info().world_size, config_.batch_size, threads_get(), config_.deterministic,
                      lr,  config_to_yaml(config_)};
  std::printf("checkpoint %s\n",
              checkpoint_save(dir_, objects_, state, info, config_.checkpoint.keep_last).c_str());
  std::fflush(stdout);
}

}  // namespace dpt::io
