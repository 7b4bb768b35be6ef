#include "io/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

namespace dpt::io {

namespace {

// Where process `pid`'s stdout goes ("/dev/pts/3", "/tmp/log", "pipe:[123]"); "" if unknown.
std::string stdout_of(const std::string& pid) {
  char target[256] = {};
  const ssize_t n = readlink(("/proc/" + pid + "/fd/1").c_str(), target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : "";
}

std::string parent_of(const std::string& pid) {
  std::ifstream stat("/proc/" + pid + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t name_end = text.rfind(')');  // the name may hold spaces and parentheses
  long long ppid = 0;                       // after the name: the state, then the parent's pid
  if (name_end == std::string::npos || std::sscanf(text.c_str() + name_end + 1, " %*s %lld", &ppid) != 1)
    return "";
  return std::to_string(ppid);
}

// Whether the launcher that started this rank writes to a terminal. Open MPI gives each
// rank a pseudo-terminal of its own whatever mpirun's stdout is, so the rank looks up its
// ancestors (through wrappers such as `sh -c`) for the first whose stdout is not that
// pseudo-terminal: mpirun's on mpirun's host. On another host that is the Open MPI
// daemon's, never a terminal, which is right: those lines reach the user through mpirun.
bool launcher_writes_to_terminal() {
  const std::string mine = stdout_of("self");
  std::string pid = "self";
  for (int depth = 0; depth < 8; ++depth) {
    pid = parent_of(pid);
    if (pid.empty() || pid == "0") return false;
    const std::string out = stdout_of(pid);
    if (out == mine) continue;
    return out.rfind("/dev/pts/", 0) == 0 || out.rfind("/dev/tty", 0) == 0;
  }
  return false;
}

// A rank started by mpirun (OMPI_COMM_WORLD_SIZE, or PMIX_RANK / PMI_RANK of other
// launchers) that sees a terminal asks whether mpirun's own output goes to one, so that
// `mpirun ... > log` writes plain lines.
bool is_terminal() {
  if (const char* tty = std::getenv("DPT_TTY")) return std::strcmp(tty, "1") == 0;
  if (isatty(STDOUT_FILENO) == 0) return false;
  const bool launched =
      std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
  return !launched || launcher_writes_to_terminal();
}

}  // namespace

Progress::Progress(int64_t epochs, int64_t every)
    : epochs_(epochs), every_(every > 0 ? every : 1), terminal_(is_terminal()) {}

void Progress::update(int64_t epoch, int64_t step, int64_t steps, double loss, double images_per_sec,
                      double eta_s) {
  bool last = step == steps;
  if (!terminal_ && step % every_ != 0 && !last) return;
  std::printf("%sepoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f img/s  ETA %.0fs%s", terminal_ ? "\r" : "",
              static_cast<long long>(epoch), static_cast<long long>(epochs_), static_cast<long long>(step),
              static_cast<long long>(steps), loss, images_per_sec, eta_s, terminal_ ? "\033[K" : "\n");
  open_line_ = terminal_;
  std::fflush(stdout);
}

void Progress::finish_line() {
  if (open_line_) std::putchar('\n');
  open_line_ = false;
}

}  // namespace dpt::io
