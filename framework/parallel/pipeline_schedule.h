// The order in which a pipeline stage runs its micro-batches' forward and backward passes
// (GPipe, 1F1B), what each order holds in memory and the idle time it leaves (the bubble).
// Pure arithmetic, shared by dist::Pipeline, the config and the tests.
#pragma once

#include <cstdint>
#include <vector>

namespace dpt::dist {

enum class PipelineSchedule {
  gpipe,        // every forward, then every backward: M micro-batches' activations held
  one_f_one_b,  // 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s holds at most S - s
};

// How dist::Pipeline runs a step; the config's `pipeline` section holds one and takes its defaults.
struct PipelineOptions {
  int64_t micro_batches = 4;
  PipelineSchedule schedule = PipelineSchedule::gpipe;
};

// One pass of one micro-batch.
struct PipelineAction {
  bool forward;
  int micro_batch;
};
// The passes stage `stage` of `stages` runs in one step, in order. Every schedule runs the
// backwards in micro-batch order 0, 1, ..., M - 1 (so gradients accumulate in the order a
// single process's do) and each forward before its backward. 1F1B: S - s - 1 forwards
// (at most M), then one forward and one backward alternately, then the remaining backwards.
std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int stages, int stage,
                                             int micro_batches);
// The micro-batches stage `stage` holds activations for at most, under `schedule`.
int pipeline_max_in_flight(PipelineSchedule schedule, int stages, int stage, int micro_batches);
// (S - 1) / (M + S - 1): the fraction of a step each stage idles when S equal stages run M
// micro-batches (either schedule; communication free).
double pipeline_bubble_theory(int stages, int micro_batches);

}  // namespace dpt::dist
