#include "io/progress.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace dpt::io {

namespace {

// Under mpirun a rank's stdout is a pseudo-terminal even when mpirun's own output goes to
// a file, so tools/run.sh says what mpirun's stdout is in DPT_TTY (1 or 0).
bool is_terminal(std::FILE* out) {
  if (const char* tty = std::getenv("DPT_TTY")) return std::strcmp(tty, "1") == 0;
  return isatty(fileno(out)) != 0;
}

}  // namespace

Progress::Progress(int64_t epochs, int64_t every, std::FILE* out)
    : epochs_(epochs), every_(every > 0 ? every : 1), out_(out), terminal_(is_terminal(out)) {}

void Progress::update(int64_t epoch, int64_t step, int64_t steps, double loss, double images_per_sec, double eta_s) {
  bool last = step == steps;
  if (!terminal_ && step % every_ != 0 && !last) return;
  std::fprintf(out_, "%sepoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f img/s  ETA %.0fs%s", terminal_ ? "\r" : "",
               static_cast<long long>(epoch), static_cast<long long>(epochs_), static_cast<long long>(step),
               static_cast<long long>(steps), loss, images_per_sec, eta_s, terminal_ ? "\033[K" : "\n");
  open_line_ = terminal_;
  std::fflush(out_);
}

void Progress::finish_line() {
  if (open_line_) std::fputc('\n', out_);
  open_line_ = false;
}

}  // namespace dpt::io
