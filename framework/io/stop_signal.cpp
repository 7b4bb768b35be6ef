// The handler writes one sig_atomic_t and nothing else (async-signal-safe); SA_RESETHAND
// restores the default action, so a second signal is not ignored.
#include "io/stop_signal.h"

#include <csignal>

namespace dpt::io {
namespace {

volatile std::sig_atomic_t g_signal = 0;  // a signal handler can reach nothing else

extern "C" void on_stop_signal(int signal) { g_signal = signal; }

}  // namespace

void stop_signals_install() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
  std::signal(SIGXFSZ, SIG_IGN);
}

int stop_signal_received() { return g_signal; }

}  // namespace dpt::io
