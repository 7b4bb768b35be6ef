#include "profile/step_profiler.h"

#include "comm/dist.h"

namespace dpt::profile {
namespace {

// Collective over the world: the mean of every rank's phases (a rank's own on one). For
// means per step (sent as f32), not long totals.
StepPhases mean_over_ranks(const StepPhases& mine) {
  const int ranks = dist::info().world_size;
  if (ranks == 1) return mine;
  Tensor t = Tensor::from_vector(std::vector<float>(mine.ms.begin(), mine.ms.end()), {5});
  dist::world()->all_reduce(t, dist::ReduceOp::sum)->wait();
  StepPhases sum;
  for (size_t i = 0; i < sum.ms.size(); ++i) sum.ms[i] = t.data<float>()[i];
  return sum.scaled(1.0 / ranks);
}

}  // namespace

StepProfiler::StepProfiler(const dist::DistributedDataParallel* ddp, TimelineOptions timeline)
    : ddp_(ddp), options_(std::move(timeline)) {
  if (options_.path.empty()) return;
  timeline_ = std::make_unique<Timeline>(options_.path);
  compute_track_ = timeline_->track("compute");
}

void StepProfiler::start_epoch() {
  update_recording();
  if (sync_) sync_();
  last_ns_ = step_begin_ns_ = now_ns();
  step_begin_counts_ = dist::collective_counts();  // what happened between epochs is no step's
}

void StepProfiler::lap(Phase phase) {
  if (sync_) sync_();
  double now = now_ns();
  double ms = (now - last_ns_) / 1e6;
  if (phase == Phase::backward && ddp_) {
    double wait_ms = std::min(ms, ddp_->reducer().exposed_wait_ms());
    current_[Phase::comm_wait] += wait_ms;
    ms -= wait_ms;
    if (recorder_) record_backward(last_ns_, now);
  } else if (recorder_) {
    timeline_->add(compute_track_, phase_name(phase), last_ns_, now);
  }
  current_[phase] += ms;
  last_ns_ = now;
  if (phase != Phase::optimizer) return;
  const dist::CollectiveCounts counts = dist::collective_counts();
  const dist::CollectiveCounts step = counts - step_begin_counts_;
  if (recorder_) {
    timeline_->counter("collectives per step", step_begin_ns_, {{"collectives", step.collectives}});
    timeline_->counter("bytes per step", step_begin_ns_, {{"bytes", step.bytes}});
  }
  stragglers_.add(current_);
  auto add_step = [&](Totals& totals) {
    totals.phases += current_;
    totals.counts += step;
    ++totals.steps;
  };
  add_step(epoch_);
  add_step(run_);
  if (run_.steps > warmup_steps) add_step(run_after_warmup_);
  current_ = {};
  step_begin_counts_ = counts;
  step_begin_ns_ = now;
  update_recording();
}

// Backward's own span, the wait for all-reduces after its last node, and each bucket's
// all-reduce from launch to completion on the bucket's row.
void StepProfiler::record_backward(double begin_ns, double end_ns) {
  const dist::Reducer& reducer = ddp_->reducer();
  double origin = reducer.origin_ns();
  double compute_end = origin + reducer.backward_end_ms() * 1e6;
  timeline_->add(compute_track_, phase_name(Phase::backward), begin_ns, compute_end);
  timeline_->add(compute_track_, phase_name(Phase::comm_wait), compute_end, end_ns);
  const auto& launched = reducer.launch_times_ms();
  const auto& completed = reducer.completion_times_ms();
  const auto& buckets = reducer.buckets();
  for (size_t b = 0; b < launched.size() && b < completed.size(); ++b) {
    // The first backward rebuilds the buckets after using them: sizes then describe new ones.
    io::JsonOut args = {{"bucket", b}};
    if (launched.size() == buckets.size()) {
      args["bytes"] = buckets[b].bytes();
      args["params"] = buckets[b].params.size();
    }
    timeline_->add(timeline_->track("allreduce bucket " + std::to_string(b)), "allreduce",
                   origin + launched[b] * 1e6, origin + completed[b] * 1e6, std::move(args));
  }
}

void StepProfiler::update_recording() {
  const int64_t step = run_.steps;  // of the run so far
  bool record = timeline_ && step >= warmup_steps && step < warmup_steps + options_.steps;
  if (record && !recorder_) recorder_.emplace(*timeline_, compute_track_);
  if (!record && recorder_) recorder_.reset();
}

StepPhases StepProfiler::take_epoch_means() {
  const StepPhases means = epoch_.mean();
  epoch_ = {};
  return mean_over_ranks(means);
}

StepPhases StepProfiler::run_means() const { return mean_over_ranks(run_totals().mean()); }

StepTraffic StepProfiler::run_traffic() const {
  const Totals& totals = run_totals();
  if (totals.steps == 0) return {};
  const double steps = static_cast<double>(totals.steps);
  return {static_cast<double>(totals.counts.collectives) / steps,
          static_cast<double>(totals.counts.bytes) / steps};
}

void StepProfiler::write_timeline() {
  recorder_.reset();
  if (timeline_) timeline_->write();
}

}  // namespace dpt::profile
