// train's whole program as one function: argument parsing, MPI, a Trainer on the config
// and the way it ends. train.cpp calls it as it is; tests/train_faults.cpp calls it with a
// step hook, so that the tests' faults run through exactly what `train` runs.
#pragma once

#include "io/run_control.h"

namespace dpt {

// Runs `train CONFIG.yaml [--set key=value ...] [--resume PATH|auto] [--timeline
// TRACE.json [--timeline-steps N]] [--sync-phases]` (argv[0] is the program's name) with
// `hook` as the trainer's step hook. Returns the process's exit code: 0 when done, 2 for
// bad arguments or any dpt::Error (one line on stderr; on several ranks every rank is
// ended, MPI_Abort, so no rank waits forever on one that died), 3 after non-finite
// gradients with `on_nonfinite: stop`, 128 + N after signal N (io/run_control.h).
int run_train_program(int argc, char** argv, io::StepHook hook = {});

}  // namespace dpt
