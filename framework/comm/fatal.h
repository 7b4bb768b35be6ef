// What a rank says when it dies, so that the first line of a failed multi-rank job names the
// rank that failed and why: a fatal signal prints "[rank R] fatal signal SIGSEGV
// (segmentation fault)" and then goes on as it would have (Open MPI's backtrace, a
// sanitizer's report, or the default action), and mpirun ends the other ranks; an uncaught
// exception ends every rank at once through abort_all() with its message.
#pragma once

namespace dpt::dist {

// Installs the handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT (chained to those
// already installed) and the std::terminate handler. dist::init() calls it; calling it again
// only updates the rank. SIGTERM and SIGINT are left to the program.
void install_fatal_handlers(int rank);

}  // namespace dpt::dist
