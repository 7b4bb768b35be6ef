// Stopping a run cleanly: SIGTERM (a scheduler's preemption notice), SIGINT (Ctrl-C) and
// SIGUSR1 only set a flag that the training loop reads between steps, so it can write a
// checkpoint and exit; the same signal again ends the process at once. SIGUSR1 is the one
// that stops an mpirun job: Open MPI's mpirun forwards it to every rank, while it answers
// SIGTERM and SIGINT by killing the ranks 1 s later (odls_base_sigkill_timeout), often
// before the checkpoint is written. SIGXFSZ is ignored, so a file-size limit shows as a
// failed write naming the file instead of a core dump.
#pragma once

#include "core/tensor.h"
#include "comm/process_group.h"

namespace dpt::io {

// Installs the handlers. Call once, early in main.
void stop_signals_install();

// The ranks' agreement on stopping after a step, so that every rank stops after the same
// one: a max all-reduce over the world of each rank's pending signal, started before the
// step's forward and read after its update. It runs while the step computes (the gradient
// all-reduces queued behind it complete after it), so reading it costs no round trip. A
// signal that arrives after start() counts at the next step.
class StopVote {
 public:
  // Collective over the world, non-blocking: starts the vote with this rank's pending
  // signal. Nothing without MPI or with one rank.
  void start();
  // The signal any rank had pending at start() (0 if none), waiting for the vote; without
  // a start() since the last result, a vote started and read at once. Collective. Without
  // MPI, or with one rank, the signal this process received (SIGTERM, SIGINT or SIGUSR1).
  int result();

 private:
  Tensor signal_;
  dist::WorkPtr work_;
};

}  // namespace dpt::io
