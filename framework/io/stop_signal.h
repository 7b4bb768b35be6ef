// Stopping a run cleanly: SIGTERM (a scheduler's preemption notice), SIGINT (Ctrl-C) and
// SIGUSR1 only set a flag that the training loop reads between steps, so it can write a
// checkpoint and exit; the same signal again ends the process at once. SIGUSR1 is the one
// that stops an mpirun job: Open MPI's mpirun forwards it to every rank, while it answers
// SIGTERM and SIGINT by killing the ranks 1 s later (odls_base_sigkill_timeout), often
// before the checkpoint is written. SIGXFSZ is ignored, so a file-size limit shows as a
// failed write naming the file instead of a core dump.
#pragma once

namespace dpt::io {

// Installs the handlers. Call once, early in main.
void stop_signals_install();

// The signal this process has received (SIGTERM, SIGINT or SIGUSR1), 0 if none.
int stop_signal_received();

}  // namespace dpt::io
