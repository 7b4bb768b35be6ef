// The handler writes one sig_atomic_t and nothing else (async-signal-safe); SA_RESETHAND
// restores the default action, so a second signal is not ignored.
#include "io/stop_signal.h"

#include <csignal>

#include "distributed/dist.h"

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
  std::signal(SIGXFSZ, SIG_IGN);
}

int stop_signal_pending() { return g_signal; }

int stop_signal_agreed() {
  if (!dist::initialized() || dist::info().world_size == 1) return stop_signal_pending();
  Tensor t = Tensor::from_vector(std::vector<int64_t>{stop_signal_pending()}, {1});
  dist::world()->all_reduce(t, dist::ReduceOp::max)->wait();
  return static_cast<int>(t.data<int64_t>()[0]);
}

}  // namespace dpt::io
