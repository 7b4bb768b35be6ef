// Training across simulated hosts (tools/cluster.sh: network namespaces on one machine), and
// how such a run ends when a host fails: a rank killed on the second host ends every rank
// within 30 s; a second host whose link goes down ends the run within distributed.timeout_s
// plus a few seconds, with the error naming the ranks that did not answer; a SIGTERM to the
// launcher stops every rank after a checkpoint. Each job's namespaces are gone afterwards.
// Hosts with more ranks than cores have Open MPI yield when idle.
// Skipped, with cluster.sh's reason, where namespaces cannot be made (not root, no
// CAP_SYS_ADMIN).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "mpi_job.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace {

// A command's exit status and its output (stdout and stderr).
std::pair<int, std::string> run_command(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

std::string source_dir() {
  const char* dir = std::getenv("DPT_SOURCE_DIR");
  return dir ? dir : ".";
}

// "" where cluster.sh can make namespaces, else its one line saying why not.
const std::string& cluster_unavailable() {
  static const std::string reason = [] {
    auto [code, output] = run_command(source_dir() + "/tools/cluster.sh --check");
    if (code == 0) return std::string();
    return output.empty() ? "cluster.sh --check exited with " + std::to_string(code) : output;
  }();
  return reason;
}

// The network namespace a process runs in, by name ("dpt3-n1"), as `ip netns` lists it.
std::string namespace_of(pid_t pid) {
  std::string name = run_command("ip netns identify " + std::to_string(pid)).second;
  return name.substr(0, name.find('\n'));
}

bool namespace_exists(const std::string& name) {
  auto [code, listing] = run_command("ip netns list");
  return listing.find(name + " ") != std::string::npos || listing.find(name + "\n") != std::string::npos;
}

struct Layout {
  int per_node;  // processes on each of the 2 hosts
};

void PrintTo(const Layout& l, std::ostream* out) { *out << "2x" << l.per_node; }

class Cluster : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    if (!cluster_unavailable().empty()) GTEST_SKIP() << cluster_unavailable();
    const char* build = std::getenv("DPT_BUILD_DIR");
    train_ = fs::path(build ? build : ".") / "train";
    ASSERT_TRUE(fs::exists(train_)) << train_ << " not built (DPT_BUILD_DIR)";
    std::ofstream(dir_.file("config.yaml"))
        << "model: {name: mlp, hidden: [32]}\n"
           "dataset: {name: synthetic, shape: [1, 8, 8], classes: 4, size: 512}\n"
           "epochs: 100000\nbatch_size: 32\nthreads: 1\nlog_every: 1000\n"
           "optimizer: {name: sgd, lr: 0.1, momentum: 0.9}\n"
           "output: {dir: " +
               dir_.file("run") + "}\n";
  }

  int world_size() const { return 2 * GetParam().per_node; }

  // train on 2 hosts, running until stopped; returns once epoch 1 is done.
  std::unique_ptr<dpt::testing::MpiJob> start(const std::string& sets = "") {
    auto job = std::make_unique<dpt::testing::MpiJob>(
        source_dir() + "/tools/cluster.sh --nodes 2 --per-node " + std::to_string(GetParam().per_node) +
            " -- " + train_.string() + " " + dir_.file("config.yaml") + sets,
        dir_.path());
    EXPECT_TRUE(job->wait_for_output("epoch 1:", std::chrono::seconds(60)))
        << job->finish(std::chrono::seconds(5));
    return job;
  }

  // The last rank, which runs on the second host (ranks fill the hosts in order); its
  // namespace is not rank 0's.
  pid_t second_host_rank(const dpt::testing::MpiJob& job, std::string& host) {
    const pid_t victim = job.rank_pid(world_size() - 1, std::chrono::seconds(10));
    const pid_t first = job.rank_pid(0, std::chrono::seconds(10));
    EXPECT_GT(victim, 0);
    EXPECT_GT(first, 0);
    host = namespace_of(victim);
    EXPECT_THAT(host, ::testing::MatchesRegex("dpt[0-9]+-n1"))
        << "rank " << world_size() - 1 << " runs in " << host;
    EXPECT_NE(namespace_of(first), host);
    return victim;
  }

  fs::path train_;
  dpt::testing::TempDir dir_{"dpt_cluster"};
};

}  // namespace

TEST_P(Cluster, ARankKilledOnTheSecondHostEndsEveryRank) {
  auto job = start();
  ASSERT_FALSE(HasFailure());
  std::string host;
  const pid_t victim = second_host_rank(*job, host);
  ASSERT_GT(victim, 0);
  job->mark();
  ::kill(victim, SIGKILL);
  dpt::testing::JobResult r = job->finish(std::chrono::seconds(60));
  ASSERT_TRUE(r.finished) << r;
  EXPECT_NE(r.exit_code, 0) << r;
  EXPECT_LT(r.seconds, 30.0) << r;
  // mpirun names the killed rank, unless another rank's exit reaches it first.
  EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr("on signal 9 (Killed)"), HasSubstr("a non-zero exit code")))
      << r;
  EXPECT_FALSE(namespace_exists(host)) << host << " is left behind";
  std::printf("every rank gone %.1f s after the kill\n", r.seconds);
}

// As a terminal's Ctrl-C or `timeout` would: the signal goes to cluster.sh's process group,
// which mpirun is not in; cluster.sh passes SIGUSR1 to mpirun, which forwards it to every rank
// on both hosts, and rank 0 writes a checkpoint before the namespaces go.
TEST_P(Cluster, SigtermToTheLauncherCheckpointsBeforeTheHostsGo) {
  auto job = start();
  ASSERT_FALSE(HasFailure());
  std::string host;
  ASSERT_GT(second_host_rank(*job, host), 0);
  job->signal_group(SIGTERM);
  dpt::testing::JobResult r = job->finish(std::chrono::seconds(60));
  ASSERT_TRUE(r.finished) << r;
  EXPECT_EQ(r.exit_code, 143) << r;
  std::smatch stopped;
  ASSERT_TRUE(std::regex_search(r.out, stopped, std::regex("signal 10: stopping after step (\\d+)"))) << r;
  EXPECT_TRUE(fs::exists(dir_.file("run/checkpoints/step-" + stopped[1].str() + ".json"))) << r;
  EXPECT_FALSE(namespace_exists(host)) << host << " is left behind";
}

TEST_P(Cluster, ASecondHostWhoseLinkGoesDownEndsTheRun) {
  const double timeout_s = 2;
  auto job = start(" --set distributed.timeout_s=2");
  ASSERT_FALSE(HasFailure());
  std::string host;
  const pid_t victim = second_host_rank(*job, host);
  ASSERT_GT(victim, 0);
  job->mark();
  auto [code, output] = run_command("nsenter -t " + std::to_string(victim) + " -n ip link set eth0 down");
  ASSERT_EQ(code, 0) << output;
  dpt::testing::JobResult r = job->finish(std::chrono::seconds(90));
  ASSERT_TRUE(r.finished) << r;
  EXPECT_NE(r.exit_code, 0) << r;
  // The collective's timeout, the question to the other ranks (1.5 s), then mpirun's own
  // teardown, which waits until TCP gives up on the second host's daemon (cluster.sh).
  EXPECT_LT(r.seconds, timeout_s + 15) << r;
  std::string silent;  // the second host's ranks: "rank 1", or "rank 2, rank 3"
  for (int rank = GetParam().per_node; rank < world_size(); ++rank)
    silent += (silent.empty() ? "rank " : ", rank ") + std::to_string(rank);
  EXPECT_THAT(r.err, HasSubstr("] error: ")) << r;
  EXPECT_THAT(r.err, HasSubstr("not complete after 2 s (distributed.timeout_s")) << r;
  // The silent ranks close the diagnosis; the rank's flight record follows it.
  EXPECT_THAT(r.err, HasSubstr("; no answer within 1.5 s from " + silent + "; flight record: ")) << r;
  EXPECT_FALSE(namespace_exists(host)) << host << " is left behind";
  std::printf("the run ended %.1f s after the link went down (distributed.timeout_s %.0f)\n", r.seconds,
              timeout_s);
}

// A rank that waits in MPI spins through its time slice unless Open MPI is told to yield, which
// it does by itself only when it knows a node is oversubscribed; cluster.sh's hostfile counts
// ranks, not the cores a host gets, so cluster.sh tells it (mpirun passes --mca settings to
// every rank as OMPI_MCA_ variables). Measured on 2 cores, 2 hosts x 2: without it a 64 KB
// all-reduce took 16 ms instead of 0.26.
TEST(ClusterCores, HostsWithMoreRanksThanCoresYieldWhenIdle) {
  if (!cluster_unavailable().empty()) GTEST_SKIP() << cluster_unavailable();
  cpu_set_t set;
  ASSERT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
  const int cores = CPU_COUNT(&set);  // what cluster.sh's nproc counts
  struct Case {
    int per_node;
    const char* expected;
  };
  std::vector<Case> cases{{cores / 2 + 1, "1"}};  // 2 hosts: more ranks than cores
  if (cores >= 2) cases.push_back({1, "unset"});
  for (const Case& c : cases) {
    auto [code, output] = run_command(source_dir() + "/tools/cluster.sh --nodes 2 --per-node " +
                                      std::to_string(c.per_node) +
                                      " -- sh -c 'echo \"yield=${OMPI_MCA_mpi_yield_when_idle:-unset}\"'");
    ASSERT_EQ(code, 0) << output;
    std::istringstream lines(output);
    int ranks = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("yield=", 0) != 0) continue;
      EXPECT_EQ(line, std::string("yield=") + c.expected) << "2 hosts x " << c.per_node << " on " << cores << " cores";
      ++ranks;
    }
    EXPECT_EQ(ranks, 2 * c.per_node) << output;
  }
}

INSTANTIATE_TEST_SUITE_P(TwoHosts, Cluster, ::testing::Values(Layout{1}, Layout{2}),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return "2x" + std::to_string(info.param.per_node);
                         });
