// train: the entry point. Parses the command line, starts MPI and runs a Trainer
// (framework/train/trainer.h) on the config: run_train_program (train_program.h), which
// says how a run ends. Checkpoints, --resume, SIGTERM/SIGINT (exit 128 + signal) and
// non-finite gradients (exit 3): io/run_control.h.
//
//   mpirun -np 2 build/train configs/default.yaml [--set key=value ...] [--resume PATH|auto]
//     [--timeline trace.json] [--sync-phases]
#include <cstdio>
#include <cstdlib>

#include "train_program.h"

int main(int argc, char** argv) {
  // Fault injection is the test program's (tests/train_faults.cpp). Refused rather than
  // ignored: a test or script still pointed at train would otherwise train without its
  // faults and fail far from the cause, or pass having tested nothing.
  if (std::getenv("DPT_DEBUG_FAULT")) {
    std::fprintf(
        stderr,
        "error: DPT_DEBUG_FAULT is read only by the test program train_faults (tests/train_faults.cpp), "
        "not by train\n");
    return 2;
  }
  return dpt::run_train_program(argc, argv);
}
