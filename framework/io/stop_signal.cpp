// The handler writes one sig_atomic_t and nothing else (async-signal-safe); SA_RESETHAND
// restores the default action, so a second signal is not ignored.
#include "io/stop_signal.h"

#include <csignal>
#include <utility>

#include "comm/dist.h"

namespace dpt::io {
namespace {

volatile std::sig_atomic_t g_signal = 0;  // a signal handler can reach nothing else

extern "C" void on_stop_signal(int signal) { g_signal = signal; }

bool one_process() { return !dist::initialized() || dist::info().world_size == 1; }

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

void StopVote::start() {
  if (one_process()) return;
  signal_ = Tensor::from_vector(std::vector<int64_t>{g_signal}, {1});
  work_ = dist::world()->all_reduce(signal_, dist::ReduceOp::max);
}

int StopVote::result() {
  if (one_process()) return g_signal;
  if (!work_) start();
  const dist::WorkPtr work = std::exchange(work_, nullptr);
  work->wait();
  return static_cast<int>(signal_.data<int64_t>()[0]);
}

}  // namespace dpt::io
