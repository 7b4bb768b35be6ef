// What a training run does around its steps so that it can stop and go on: resuming from a
// checkpoint, saving one every `checkpoint.every_epochs` and on a stop signal (below), deciding
// what a step with non-finite gradients does, and a test's step hook. The training loop calls
// it at a few fixed points; every rank calls each function at the same point, so the
// collective ones (stop_requested) line up.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "comm/process_group.h"
#include "core/tensor.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/progress.h"
#include "optim/nonfinite.h"

namespace dpt::io {

// Stopping a run cleanly: SIGTERM (a scheduler's preemption notice), SIGINT (Ctrl-C) and
// SIGUSR1 only set a flag that the training loop reads between steps (RunControl's stop
// vote), so it can write a checkpoint and exit; the same signal again ends the process at
// once. SIGUSR1 is the one that stops an mpirun job: Open MPI's mpirun forwards it to every
// rank, while it answers SIGTERM and SIGINT by killing the ranks 1 s later
// (odls_base_sigkill_timeout), often before the checkpoint is written. SIGXFSZ is ignored,
// so a file-size limit shows as a failed write naming the file instead of a core dump.
// Installs the handlers; call once, early in main.
void stop_signals_install();

// A seam for tests, set by the program that wires the trainer (train::TrainerOptions):
// `train` sets none; tests/train_faults.cpp injects the faults of DPT_DEBUG_FAULT through
// it. Either member may be empty.
struct StepHook {
  // Called on every rank as global step `step` (from 1) begins, before its forward pass
  // and its stop vote starts: a signal it raises counts in that step's vote.
  std::function<void(int64_t step)> before_step;
  // Given step `step`'s loss after the forward pass (each micro-batch's in a pipeline),
  // returns the loss the step goes on with: backward and the non-finite check see it. A
  // step replayed from a CUDA graph (cuda_graphs) does not call it.
  std::function<Tensor(int64_t step, const Tensor& loss)> loss;
};

class RunControl {
 public:
  // `objects.model` is the bare model (not DDP); `progress` is the live line, ended before
  // messages; `hook` is called at each step as StepHook says. Requires dist::init().
  RunControl(const Config& config, const TrainingObjects& objects, Progress& progress, StepHook hook = {});

  // Restores the checkpoint `--resume ARG` names ("auto" without one: a fresh start), says
  // so on rank 0, and in deterministic mode with `threads: 0` takes the checkpoint's
  // thread count. ARG "" (no --resume) is a fresh start, refused (dpt::Error) when the
  // checkpoint directory already holds an earlier run's checkpoints. Throws dpt::Error
  // for a bad checkpoint. Collective: rank 0 looks in its output directory and reads the
  // checkpoint, every rank loads rank 0's bytes (the other hosts of a cluster need not see
  // the directory).
  void resume(const std::string& arg);
  // Where training stands; the run's counters (step, times, accuracies) live here.
  TrainingProgress& progress() { return at_; }

  // Samples of epoch `epoch`'s global order already trained on (only the epoch a mid-epoch
  // checkpoint stopped in has any).
  int64_t samples_done(int64_t epoch) const { return epoch == at_.epoch ? at_.samples_in_epoch : 0; }

  // Before a step's forward pass: the hook's before_step, in skip mode a copy of the
  // buffers, and the start of the step's stop vote (stop_vote_ below). Collective.
  void before_forward();
  // The step's loss, or what the hook's `loss` makes of it.
  Tensor loss_hook(const Tensor& loss) const;

  enum class StepAction { apply, skip, stop };
  // After backward: counts the step and says whether to apply its update. For non-finite
  // gradients prints why on rank 0 (with the last good checkpoint) and returns skip or stop
  // as on_nonfinite says; on stop every rank has also passed a barrier, so the message is out.
  StepAction after_backward(const Tensor& loss, int64_t epoch, int64_t step_in_epoch, int64_t steps);
  // The same for a step whose check ran on the device (cuda_graphs): `finite` is its
  // verdict, `loss` this rank's loss.
  StepAction after_backward(bool finite, float loss, int64_t epoch, int64_t step_in_epoch, int64_t steps);

  // Collective, after each step: the signal any rank had received when the step began (0
  // if none; the vote before_forward started). When non-zero,
  // rank 0 has saved a checkpoint at (epoch, step_in_epoch), with the epoch's loss so far
  // (`loss_sum()` over `applied` steps on this rank; called only then, as reading a loss
  // kept on a GPU waits for it), and every rank passed a barrier after it.
  int stop_requested(int64_t epoch, int64_t step_in_epoch, float lr, const std::function<double()>& loss_sum,
                     int64_t applied);

  // The epoch's mean training loss over ranks, including a resumed epoch's earlier steps.
  // Collective.
  double epoch_loss(int64_t epoch, double loss_sum, int64_t applied) const;

  // After epoch `epoch` (from 0) on every rank: training now stands at the next epoch's
  // start, and rank 0 saves a checkpoint when every_epochs says so (collective then: a
  // sharded optimizer gathers its state).
  void epoch_end(int64_t epoch, float lr);

 private:
  // The epoch's loss sum (mean over ranks) and applied steps, a resumed epoch's earlier ones included.
  std::pair<double, int64_t> epoch_totals(int64_t epoch, double loss_sum, int64_t applied) const;
  void move_to(int64_t epoch, int64_t step_in_epoch);  // every rank
  void save(float lr);                                 // every rank; rank 0 writes
  // Rank 0's part of resume(): refuses or clears an earlier run's checkpoints, and returns
  // the checkpoint's JSON path ("" for a fresh start).
  std::string choose_checkpoint(const std::string& arg);

  const Config& config_;
  TrainingObjects objects_;
  Progress& progress_;
  std::string dir_;
  StepHook hook_;
  // The ranks' agreement on stopping after a step, so that every rank stops after the same
  // one: a max all-reduce over the world of each rank's pending signal (stop_signals_install),
  // started before the step's forward and read after its update. It runs while the step
  // computes (the gradient all-reduces queued behind it complete after it), so reading it
  // costs no round trip. A signal that arrives after the start counts at the next step. With
  // one rank there is no vote: the signal this process received decides.
  Tensor stop_signal_;
  dist::WorkPtr stop_vote_;
  optim::NonfiniteGuard guard_;
  TrainingProgress at_;
};

}  // namespace dpt::io
