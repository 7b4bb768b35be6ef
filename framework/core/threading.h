// How many threads compute kernels use. OpenMP runs both our loops and oneDNN's, so one
// setting governs all of them.
#pragma once

namespace dpt {

// CPUs this process may run on (sched_getaffinity): respects how mpirun bound the rank.
int threads_available();
// Sets the compute threads; n <= 0 means threads_available().
void threads_set(int n);
int threads_get();
// For deterministic runs: OpenMP may not change the thread count from one parallel region
// to the next (omp_set_dynamic(0)), so every region splits its work the same way.
void threads_set_deterministic();

}  // namespace dpt
