// The main() of every tests/test_mpi_*.cpp, run under mpirun: each rank runs every test;
// rank 0 prints GoogleTest's usual output, the others only their failures (prefixed with
// the rank), and every rank exits non-zero when a test failed on any rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "distributed/dist.h"

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
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0, any_failed = failed;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed && !failed)
    std::fprintf(stderr, "[rank %d] passed here, but a test failed on another rank\n", rank);
  dpt::dist::finalize();
  return any_failed;
}
