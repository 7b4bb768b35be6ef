// How a two-rank job ends when one rank goes wrong (tests/fault_rank.cpp does it on purpose):
// every rank exits, non-zero, well within 30 s, and the first line on stderr is the failing
// rank's own account — an error naming the collective, its number and the ranks concerned;
// a fatal signal; an uncaught exception — or, for SIGKILL, which nothing can report from
// inside, mpirun's line naming the rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "mpi_job.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

struct Scenario {
  const char* name;
  const char* first_line;  // the start of stderr's first line
  const char* also;        // more of that line ("" for none)
  double min_seconds;      // the timeout scenarios wait for the 2 s timeout first
};

void PrintTo(const Scenario& s, std::ostream* out) { *out << s.name; }

class Faults : public ::testing::TestWithParam<Scenario> {};

}  // namespace

TEST_P(Faults, EveryRankEndsNonZeroWithTheFailingRanksMessageFirst) {
  const Scenario& s = GetParam();
  const char* build = std::getenv("DPT_BUILD_DIR");
  const fs::path program = fs::path(build ? build : ".") / "fault_rank";
  ASSERT_TRUE(fs::exists(program)) << program << " not built (DPT_BUILD_DIR)";
  dpt::testing::TempDir dir("dpt_faults");
  dpt::testing::MpiJob job("mpirun --oversubscribe --bind-to none -np 2 " + program.string() + " " + s.name,
                           dir.path());
  dpt::testing::JobResult r = job.finish(std::chrono::seconds(60));
  ASSERT_TRUE(r.finished) << s.name << ": still running after 60 s\n" << r.err;
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_GE(r.seconds, s.min_seconds);
  EXPECT_LT(r.seconds, 30.0) << r.err;
  EXPECT_THAT(r.first_err_line(), StartsWith(s.first_line)) << r.err;
  EXPECT_THAT(r.first_err_line(), HasSubstr(s.also)) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    FaultRank, Faults,
    ::testing::Values(
        // Either rank may be first; both print the same line.
        Scenario{"debug-mismatch", "[rank ",
                 "] error: world: collective #2 differs between ranks (debug: collectives): rank 0 calls "
                 "all_reduce(sum) of 1000 f32, rank 1 calls all_reduce(sum) of 1001 f32",
                 0},
        Scenario{
            "size-mismatch",
            "[rank 0] error: all_reduce(sum) of 1000 f32 on world (collective #2): not complete after 2 s",
            "; called it with other arguments: rank 1 as all_reduce(sum) of 0 f32", 2},
        Scenario{
            "missing",
            "[rank 0] error: all_reduce(sum) of 1000 f32 on world (collective #2): not complete after 2 s",
            "; did not arrive: rank 1 (its latest collective on world: #1 barrier)", 2},
        Scenario{"throw", "[rank 1] error: rank 1 fails on purpose", "", 0},
        Scenario{"segv", "[rank 1] fatal signal SIGSEGV (segmentation fault)", "", 0},
        Scenario{"terminate", "[rank 1] error: uncaught exception: thrown on a thread of rank 1 on purpose",
                 "", 0}),
    [](const ::testing::TestParamInfo<Scenario>& info) {
      std::string name = info.param.name;
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

TEST(FaultRankKilled, MpirunNamesTheRankAndEndsTheOthers) {
  // SIGKILL leaves the rank no chance to say anything: mpirun's report names it, and no
  // other rank reports a failure of its own first.
  const char* build = std::getenv("DPT_BUILD_DIR");
  const fs::path program = fs::path(build ? build : ".") / "fault_rank";
  dpt::testing::TempDir dir("dpt_faults");
  dpt::testing::MpiJob job("mpirun --oversubscribe --bind-to none -np 2 " + program.string() + " kill",
                           dir.path());
  dpt::testing::JobResult r = job.finish(std::chrono::seconds(60));
  ASSERT_TRUE(r.finished) << r.err;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_THAT(r.err, HasSubstr("process rank 1 with PID"));
  EXPECT_THAT(r.err, HasSubstr("on signal 9 (Killed)"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("[rank 0]")));
}
