// The straggler report's cost (profile/straggler.h): the median time of one report, the
// medians of a window of steps and one 6-float all-gather over the world, as a training
// loop pays it every log_every steps. Run:
//   mpirun --oversubscribe -np 2 build/bench_straggler [steps per window, default 50] [reports, default 200]
#include <cstdio>
#include <cstdlib>

#include "comm/dist.h"
#include "median_ms.h"
#include "profile/straggler.h"

using namespace dpt;

int main(int argc, char** argv) {
  const int window = argc > 1 ? std::atoi(argv[1]) : 50, reports = argc > 2 ? std::atoi(argv[2]) : 200;
  dist::init();
  profile::StragglerWatch watch;
  const profile::StepPhases step{0.1, 10.0 + dist::info().rank, 20.0, 2.0, 0.5};
  const double ms = median_ms(
      [&] {
        for (int s = 0; s < window; ++s) watch.add(step);
        watch.report();
      },
      reports);
  if (dist::info().rank == 0)
    std::printf("{\"bench\":\"straggler_report\",\"ranks\":%d,\"window_steps\":%d,\"median_ms\":%.4f}\n",
                dist::info().world_size, window, ms);
  dist::finalize();
  return 0;
}
