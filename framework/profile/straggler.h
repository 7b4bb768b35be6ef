// Which rank is slow: under DDP every rank's step lasts as long as the slowest one's, and
// the fast ranks show it as waiting for the all-reduces, so a rank's own work is its step
// less that wait. Each rank keeps its steps' phases; a report gathers every rank's medians
// with one small all-gather over the world and names, on rank 0, each rank whose work is
// more than `threshold` above the median rank's, with its host and the phase that differs:
//   straggler: rank 5 (host node1) works 41.0 ms a step vs median 30.0 ms: data 12.0 ms vs 1.0 ms
#pragma once

#include <string>
#include <vector>

#include "io/json.h"
#include "profile/step_phases.h"

namespace dpt::profile {

// One rank's medians over a window of steps: each phase's, and the median work (step less
// comm_wait) of its steps.
struct RankMedians {
  StepPhases phases;
  double work_ms = 0;
};

// The medians of `steps` (zeros for none).
RankMedians medians_of(const std::vector<StepPhases>& steps);

// Every rank's medians, indexed by world rank, with their hosts: the report's lines, one per
// rank whose work exceeds (1 + threshold) times the median over ranks (none for one rank).
std::vector<std::string> straggler_lines(const std::vector<RankMedians>& ranks,
                                         const std::vector<std::string>& hosts, double threshold);

class StragglerWatch {
 public:
  static constexpr double kThreshold = 0.2;  // work 20% above the median rank's

  // Collective over the world: learns every rank's host (one all-gather, once).
  StragglerWatch();
  // A finished step's phases.
  void add(const StepPhases& step);
  // Collective over the world (every rank calls it at the same step): every rank's medians
  // over the steps added since the last report, one all-gather; the lines on rank 0, none
  // elsewhere.
  std::vector<std::string> report();
  // Collective: the same over all steps added after the first `skip` of the run: on rank 0
  // each rank's host and medians, and the lines, for summary.json ("ranks", "stragglers").
  io::JsonOut run_report(size_t skip);

 private:
  std::vector<RankMedians> gather(const RankMedians& mine) const;

  std::vector<std::string> hosts_;
  std::vector<StepPhases> window_, run_;
};

}  // namespace dpt::profile
