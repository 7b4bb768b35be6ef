// Stopping a run cleanly: SIGTERM (a scheduler's preemption notice) and SIGINT (Ctrl-C)
// only set a flag that the training loop reads between steps, so it can write a
// checkpoint and exit; the same signal again ends the process at once. SIGXFSZ is ignored,
// so a file-size limit shows as a failed write naming the file instead of a core dump.
#pragma once

namespace dpt::io {

// Installs the handlers. Call once, early in main.
void stop_signals_install();

// The signal this process received (SIGTERM or SIGINT), 0 if none.
int stop_signal_pending();

// The signal any rank received, 0 if none: collective over the world (a max all-reduce
// of one number), so every rank stops after the same step. Without MPI, or with one rank,
// it is stop_signal_pending().
int stop_signal_agreed();

}  // namespace dpt::io
