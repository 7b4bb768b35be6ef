// train_faults: the train program with the faults of DPT_DEBUG_FAULT (fault_injection.h)
// installed as the trainer's step hook. Everything else is train's own code
// (run_train_program), so what a test sees after a fault is what train does; train itself
// refuses the variable.
//
//   DPT_DEBUG_FAULT=sigterm@20:0 mpirun -np 2 build/train_faults CONFIG.yaml [train's arguments]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "comm/dist.h"
#include "fault_injection.h"
#include "ops/elementwise.h"
#include "train_program.h"

using namespace dpt;

namespace {

// The hook that does `spec`'s faults. The rank is read at each step: the hook runs after
// run_train_program's dist::init(). Throws dpt::Error for a malformed spec.
io::StepHook fault_hook(const char* spec) {
  const dpt::testing::FaultInjection faults(spec ? spec : "");
  return {.before_step = [faults](int64_t step) { faults.before_step(step, dist::info().rank); },
          .loss =
              [faults](int64_t step, const Tensor& loss) {
                return faults.nan_at(step, dist::info().rank) ? mul(loss, NAN) : loss;
              }};
}

}  // namespace

int main(int argc, char** argv) {
  io::StepHook hook;
  try {
    hook = fault_hook(std::getenv("DPT_DEBUG_FAULT"));
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return run_train_program(argc, argv, std::move(hook));
}
