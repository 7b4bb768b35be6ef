// The live progress line. On a terminal it redraws one line (epoch, step/total, loss,
// images/s, ETA); in a log file or pipe it prints a plain line every `every` steps. Under
// mpirun "a terminal" means mpirun's own stdout (each rank's is a pseudo-terminal
// whatever mpirun writes to); DPT_TTY=1 or 0 overrides the guess.
#pragma once

#include <cstdint>

namespace dpt::io {

class Progress {
 public:
  Progress(int64_t epochs, int64_t every);  // writes to stdout
  void update(int64_t epoch, int64_t step, int64_t steps, double loss, double images_per_sec, double eta_s);
  void finish_line();  // ends a redrawn line before other output

 private:
  int64_t epochs_, every_;
  bool terminal_;
  bool open_line_ = false;
};

}  // namespace dpt::io
