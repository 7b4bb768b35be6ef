// The straggler report's arithmetic (profile/straggler.h) on made-up phases, worked out by
// hand: medians of a rank's steps, the median rank's work, who is named and with which phase.
#include <gtest/gtest.h>

#include "profile/straggler.h"

using namespace dpt::profile;

TEST(Straggler, MediansOfARanksSteps) {
  // data, forward, backward, comm_wait, optimizer; work = step less comm_wait.
  const std::vector<StepPhases> steps = {
      {1, 10, 20, 5, 1}, {3, 12, 22, 1, 1}, {2, 11, 30, 9, 1}, {2, 40, 21, 0, 1}};
  const RankMedians m = medians_of(steps);
  EXPECT_DOUBLE_EQ(m.phases[Phase::data], 2.0);      // 1 2 2 3
  EXPECT_DOUBLE_EQ(m.phases[Phase::forward], 11.5);  // 10 11 12 40
  EXPECT_DOUBLE_EQ(m.phases[Phase::backward], 21.5);
  EXPECT_DOUBLE_EQ(m.phases[Phase::comm_wait], 3.0);
  EXPECT_DOUBLE_EQ(m.work_ms, 41.0);  // works 32 38 44 64: (38 + 44) / 2
  EXPECT_DOUBLE_EQ(medians_of({}).work_ms, 0.0);
}

TEST(Straggler, NamesRanksWorkingMoreThanTheThresholdAboveTheMedianRank) {
  auto rank = [](double data, double forward, double comm_wait) {
    StepPhases p{data, forward, 20, comm_wait, 1};
    return RankMedians{p, p.step_ms() - comm_wait};
  };
  // Works 31, 30, 44 (data 14) and 37.2: the median rank works 34.1 (31 and 37.2), so 1.2x
  // is 40.92: only rank 2 is over it, by its data phase (14 against the median 1).
  const std::vector<RankMedians> ranks = {rank(1, 9, 13), rank(1, 8, 14), rank(14, 9, 0), rank(1, 15.2, 7)};
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  EXPECT_EQ(straggler_lines(ranks, hosts, 0.2),
            (std::vector<std::string>{
                "straggler: rank 2 (host b) works 44.0 ms a step vs median 34.1 ms: data wait "
                "14.0 ms vs 1.0 ms"}));
  EXPECT_TRUE(straggler_lines(ranks, hosts, 0.3).empty());              // 44 < 1.3 x 34.1
  EXPECT_TRUE(straggler_lines({rank(50, 50, 0)}, {"a"}, 0.2).empty());  // one rank: no median to beat
}
