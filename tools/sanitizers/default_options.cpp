// Linked into every program of a -DDPT_SANITIZE=ON build: the sanitizers' settings live here,
// in the binaries, so that they apply however a program starts (ctest, gtest discovery at
// build time, mpirun's ranks, by hand) without anyone exporting ASAN_OPTIONS. A variable
// set in the environment still wins over these.
// DPT_SANITIZER_DIR is this directory (set by CMakeLists.txt), for the suppression files.

extern "C" {

// Leaks are reported (detect_leaks), except those in lsan.supp: memory the MPI runtime
// keeps until exit by design; whole stacks for every allocation (fast_unwind_on_malloc=0)
// so that those suppressions can match through Open MPI's frame-pointer-less code.
// abort_on_error: a report ends the process with SIGABRT, which dpt's handler names with
// the rank, so mpirun ends the other ranks.
const char* __asan_default_options() {
  return "detect_leaks=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1:"
         "fast_unwind_on_malloc=0";
}

const char* __lsan_default_options() {
  return "suppressions=" DPT_SANITIZER_DIR "/lsan.supp:print_suppressions=0";
}

const char* __ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1:suppressions=" DPT_SANITIZER_DIR "/ubsan.supp";
}
}
