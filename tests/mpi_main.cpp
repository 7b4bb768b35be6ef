// The main() of every tests/test_mpi_*.cpp, run under mpirun: each rank runs every test;
// rank 0 prints GoogleTest's usual output, the others only their failures (prefixed with
// the rank), and every rank exits non-zero when a test failed on any rank.
// Skips: when no test failed and every test that ran was skipped on every rank, every rank
// exits DPT_TEST_SKIP_CODE, which CMakeLists.txt gives CTest as SKIP_RETURN_CODE, so a binary
// that checked nothing is reported as Skipped, never Passed. When only some were skipped,
// rank 0 says which and why in one line ("3 of 12 cases skipped: A.B (why), ...").
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "comm/dist.h"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(), result.message());
  }
  void OnTestEnd(const testing::TestInfo& test) override {
    if (test.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, test.test_suite_name(), test.name());
  }

 private:
  int rank_;
};

// The first line of the reason GTEST_SKIP() was given, or "" when none.
std::string skip_reason(const testing::TestResult& result) {
  for (int i = 0; i < result.total_part_count(); ++i) {
    const testing::TestPartResult& part = result.GetTestPartResult(i);
    if (!part.skipped()) continue;
    std::string message = part.message();
    message.erase(0, message.find_first_not_of("\n "));
    return message.substr(0, message.find('\n'));
  }
  return "";
}

// "3 of 12 cases skipped: Suite.Name (why), ..." for this rank's skipped tests.
std::string skipped_summary(const testing::UnitTest& unit) {
  std::string line = std::to_string(unit.skipped_test_count()) + " of " +
                     std::to_string(unit.test_to_run_count()) + " cases skipped:";
  const char* separator = " ";
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const testing::TestSuite& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const testing::TestInfo& test = *suite.GetTestInfo(t);
      if (!test.result()->Skipped()) continue;
      const std::string why = skip_reason(*test.result());
      line +=
          separator + std::string(suite.name()) + "." + test.name() + (why.empty() ? "" : " (" + why + ")");
      separator = ", ";
    }
  }
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  try {
    rank = dpt::dist::init().rank;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist::init() failed: %s\n", e.what());
    return 1;
  }
  testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  if (rank != 0) {
    testing::TestEventListeners& listeners = unit.listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0, any_failed = failed;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed && !failed)
    std::fprintf(stderr, "[rank %d] passed here, but a test failed on another rank\n", rank);
  const int skipped = unit.skipped_test_count(), ran = unit.test_to_run_count();
  int all_skipped = ran > 0 && skipped == ran ? 1 : 0, all_skipped_everywhere = all_skipped;
  MPI_Allreduce(&all_skipped, &all_skipped_everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0 && skipped > 0) std::printf("%s\n", skipped_summary(unit).c_str());
  std::fflush(stdout);
  dpt::dist::finalize();
  if (any_failed) return 1;
  return all_skipped_everywhere ? DPT_TEST_SKIP_CODE : 0;
}
