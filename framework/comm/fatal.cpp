// The fatal-signal and terminate handlers of fatal.h. The signal handler does only what is
// async-signal-safe: write(2) of a line formatted in advance, sigaction and raise.
#include "comm/fatal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "comm/dist.h"

namespace dpt::dist {
namespace {

struct FatalSignal {
  int number;
  const char* text;  // the whole line after the rank, formatted in advance
};
constexpr FatalSignal kSignals[] = {
    {SIGSEGV, "fatal signal SIGSEGV (segmentation fault)"},
    {SIGBUS, "fatal signal SIGBUS (bus error)"},
    {SIGFPE, "fatal signal SIGFPE (arithmetic error)"},
    {SIGILL, "fatal signal SIGILL (illegal instruction)"},
    {SIGABRT, "fatal signal SIGABRT (abort)"},
};
constexpr int kSignalCount = sizeof kSignals / sizeof kSignals[0];

struct sigaction g_previous[kSignalCount];
char g_prefix[32] = "[rank ?] ";
std::atomic<bool> g_installed{false};

void write_all(const char* text, size_t n) {
  while (n > 0) {
    ssize_t wrote = write(STDERR_FILENO, text, n);
    if (wrote <= 0) return;
    text += wrote;
    n -= static_cast<size_t>(wrote);
  }
}

void on_fatal_signal(int number, siginfo_t* info, void* context) {
  int index = 0;
  while (index < kSignalCount && kSignals[index].number != number) ++index;
  if (index == kSignalCount) return;
  write_all(g_prefix, std::strlen(g_prefix));
  write_all(kSignals[index].text, std::strlen(kSignals[index].text));
  write_all("\n", 1);
  // Then what would have happened without us: the previous handler, once.
  const struct sigaction& previous = g_previous[index];
  sigaction(number, &previous, nullptr);
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction) previous.sa_sigaction(number, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(number);
  }
  // If it returned (or there was none): the default action. The signal is blocked while
  // this handler runs, so it arrives on return; a fault would also recur on return.
  signal(number, SIG_DFL);
  raise(number);
}

void on_terminate() {
  std::string what = "std::terminate called without an active exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = std::string("uncaught exception: ") + x.what();
    } catch (...) {
      what = "uncaught exception of a type not derived from std::exception";
    }
  }
  abort_all("error: " + what, 1);
}

}  // namespace

void install_fatal_handlers(int rank) {
  std::snprintf(g_prefix, sizeof g_prefix, "[rank %d] ", rank);
  if (g_installed.exchange(true)) return;
  for (int i = 0; i < kSignalCount; ++i) {
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fatal_signal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(kSignals[i].number, &action, &g_previous[i]);
  }
  std::set_terminate(on_terminate);
}

}  // namespace dpt::dist
