#include "core/threading.h"

#include <omp.h>
#include <sched.h>

namespace dpt {

int threads_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

void threads_set(int n) { omp_set_num_threads(n > 0 ? n : threads_available()); }

int threads_get() { return omp_get_max_threads(); }

void threads_set_deterministic() { omp_set_dynamic(0); }

}  // namespace dpt
