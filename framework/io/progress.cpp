#include "io/progress.h"

#include <unistd.h>

namespace dpt::io {

Progress::Progress(int64_t epochs, int64_t every, std::FILE* out)
    : epochs_(epochs), every_(every > 0 ? every : 1), out_(out), terminal_(isatty(fileno(out)) != 0) {}

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
