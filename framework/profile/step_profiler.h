// Times each training step by phase (step_phases.h) and, when asked, records a window of
// steps into a Timeline: the loop calls lap() after each phase, and the profiler splits
// DDP's exposed all-reduce wait off backward and adds each bucket's all-reduce to the
// timeline. It also counts each step's collectives on every process group
// (dist::collective_counts()): the round trips a step makes. With no timeline it costs two
// clock reads a phase and a look at the counters a step.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "parallel/ddp.h"
#include "profile/step_phases.h"
#include "profile/straggler.h"
#include "profile/timeline.h"

namespace dpt::profile {

struct TimelineOptions {
  std::string path;    // empty: no timeline
  int64_t steps = 10;  // how many steps it records, from step warmup_steps of the run on
};

class StepProfiler {
 public:
  // `ddp`: the model's DDP wrapper, or null (one rank). Collective over the world (the
  // straggler watch learns the ranks' hosts; a timeline checks its path on rank 0).
  StepProfiler(const dist::DistributedDataParallel* ddp, TimelineOptions timeline);

  // Called before each phase boundary's clock read when set: on a GPU, a device
  // synchronise makes each phase hold its own kernels' time, not only their launches
  // (train sets it with --sync-phases or --timeline). Unset, no phase waits for the GPU.
  void set_phase_sync(std::function<void()> sync) { sync_ = std::move(sync); }
  // Before a step's batch is fetched, the first time in an epoch (time in between, such as
  // evaluation, counts in no phase).
  void start_epoch();
  // The time since the last lap goes to `phase`; Phase::backward moves DDP's exposed wait
  // into Phase::comm_wait; Phase::optimizer ends the step.
  void lap(Phase phase);
  // Mean phases per step of the epoch's steps, over every rank (collective); starts a new epoch's sums.
  StepPhases take_epoch_means();
  // Mean phases per step of the run after `warmup_steps` (all of them for a shorter run),
  // over every rank (collective).
  StepPhases run_means() const;
  // This rank's collectives and bytes per step, over the same steps as run_means(): what
  // every collective called from one step's first lap to its last costs (not collective).
  StepTraffic run_traffic() const;
  // Collective over the world: writes the timeline when one was asked for.
  void write_timeline();
  // Collective over the world (every rank at the same step): the straggler lines of the
  // steps since the last report, on rank 0 (straggler.h).
  std::vector<std::string> straggler_report() { return stragglers_.report(); }
  // Collective: every rank's medians and the straggler lines over the run after the
  // warm-up, for summary.json (on rank 0).
  io::JsonOut straggler_run_report() { return stragglers_.run_report(warmup_steps); }

  // The first steps build caches and DDP's buckets: the run's means and a timeline skip them.
  static constexpr int64_t warmup_steps = 2;

 private:
  // Sums over a span of steps.
  struct Totals {
    StepPhases phases;
    dist::CollectiveCounts counts;
    int64_t steps = 0;
    StepPhases mean() const { return phases.scaled(steps > 0 ? 1.0 / static_cast<double>(steps) : 0.0); }
  };
  void record_backward(double begin_ns, double end_ns);
  void update_recording();
  // The run's steps after the warm-up, or all of them for a shorter run.
  const Totals& run_totals() const { return run_after_warmup_.steps > 0 ? run_after_warmup_ : run_; }

  const dist::DistributedDataParallel* ddp_;
  std::function<void()> sync_;
  TimelineOptions options_;
  std::unique_ptr<Timeline> timeline_;
  std::optional<BackwardRecorder> recorder_;
  int compute_track_ = 0;
  double last_ns_ = 0;
  StepPhases current_;
  Totals epoch_, run_, run_after_warmup_;
  double step_begin_ns_ = 0;
  dist::CollectiveCounts step_begin_counts_;
  StragglerWatch stragglers_;
};

}  // namespace dpt::profile
