// The train binary end to end: a short run on synthetic data writes its metrics files,
// every kind of bad input ends with one clear line on stderr and exit code 2, and a fault on
// one of two ranks (an error, ranks that disagree, a hung rank, a signal) ends both within
// 30 s, non-zero, with the failing rank's message first.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "io/atomic_file.h"
#include "io/json.h"
#include "mpi_job.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/device.h"
#endif

namespace fs = std::filesystem;
namespace io = dpt::io;
using dpt::io::read_file;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

struct Result {
  int exit_code;
  std::string out, err;
};

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* build = std::getenv("DPT_BUILD_DIR");
    train_ = fs::path(build ? build : ".") / "train";
    ASSERT_TRUE(fs::exists(train_)) << train_ << " not built (DPT_BUILD_DIR)";
    dir_ = fs::temp_directory_path() / ("dpt_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p;
  }

  Result train(const std::string& args) { return run(train_.string() + " " + args); }

  Result run(const std::string& command) {
    std::string cmd = command + " >" + (dir_ / "out").string() + " 2>" + (dir_ / "err").string();
    int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(dir_ / "out"), read_file(dir_ / "err")};
  }

  // Expects exit code 2 and exactly one line on stderr containing `needle`.
  void expect_clear_error(const std::string& args, const std::string& needle) {
    Result r = train(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr(needle));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }

  std::string synthetic_config(const std::string& extra = "") {
    return "model: {name: mlp, hidden: [32]}\n"
           "dataset: {name: synthetic, shape: [1, 8, 8], classes: 4, size: 512}\n"
           "epochs: 2\nbatch_size: 32\nthreads: 1\n"
           "optimizer: {name: sgd, lr: 0.1, momentum: 0.9}\n"
           "output: {dir: " +
           (dir_ / "run").string() + "}\n" + extra;
  }

  fs::path train_;
  fs::path dir_;
};

}  // namespace

TEST_F(TrainCli, ShortRunWritesMetricsAndSummary) {
  Result r = train(write("ok.yaml", synthetic_config()).string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string metrics = read_file(dir_ / "run" / "metrics.jsonl");
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 2);
  std::stringstream lines(metrics);
  int64_t epoch = 0;
  for (std::string line; std::getline(lines, line);) {
    const io::JsonIn m = io::json_parse(line, "metrics.jsonl");
    EXPECT_EQ(io::json_int(io::json_at(m, "epoch", line), line), ++epoch);
    for (const char* key :
         {"train_loss", "test_loss", "test_acc", "images_per_sec", "epoch_time_s", "elapsed_s", "lr",
          "data_ms", "forward_ms", "backward_ms", "comm_wait_ms", "optimizer_ms", "step_ms"})
      io::json_number(io::json_at(m, key, line), line + ": " + key);
    // Measurements people read: 9 significant digits at most (a float's, exactly), not 17:
    // each value is the double nearest its own 9-digit form. (The text is usually that form;
    // nlohmann's Grisu2 prints about 1 value in 600 with 17 digits, json.h.)
    for (const auto& [key, value] : m.items()) {
      if (!value.is_number_float()) continue;
      char nine[32];
      std::snprintf(nine, sizeof nine, "%.9g", value.get<double>());
      EXPECT_EQ(std::strtod(nine, nullptr), value.get<double>()) << key << ": " << value.dump();
    }
  }
  const io::JsonIn summary = io::json_parse(read_file(dir_ / "run" / "summary.json"), "summary.json");
  for (const char* key : {"final_test_acc", "best_test_acc", "total_time_s", "images_per_sec", "step_ms"})
    io::json_number(io::json_at(summary, key, "summary.json"), std::string("summary.json: ") + key);
  EXPECT_EQ(summary.at("world_size"), 1);
  EXPECT_EQ(summary.at("model"), "mlp");
  EXPECT_EQ(summary.at("params"), 2212);
  EXPECT_EQ(summary.at("device"), "cpu");
}

TEST_F(TrainCli, SetOverridesAKey) {
  Result r = train(write("ok.yaml", synthetic_config()).string() + " --set epochs=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string metrics = read_file(dir_ / "run" / "metrics.jsonl");
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 1);
}

TEST_F(TrainCli, BadConfigsAreOneLineAndExitCode2) {
  expect_clear_error((dir_ / "missing.yaml").string(), "missing.yaml");
  expect_clear_error(write("syntax.yaml", "model: {name: mlp\nepochs: [3\n").string(), "syntax.yaml");
  expect_clear_error(write("unknown.yaml", synthetic_config("epochz: 3\n")).string(), "epochz");
  expect_clear_error(write("type.yaml", synthetic_config() + "seed: banana\n").string(), "seed");
  expect_clear_error(write("lr.yaml", synthetic_config()).string() + " --set optimizer.lr=-1", "lr");
  expect_clear_error(write("batch.yaml", synthetic_config()).string() + " --set batch_size=0", "batch_size");
  expect_clear_error(write("model.yaml", synthetic_config()).string() + " --set model.name=nope",
                     "unknown model 'nope'");
  expect_clear_error("", "no config file");
}

// Fault injection is the test program train_faults's: train refuses the variable rather than
// train without the faults a stale test or script asked for.
TEST_F(TrainCli, DebugFaultIsRefusedAndNamesTheTestProgram) {
  Result r = run("DPT_DEBUG_FAULT=sigterm@1 " + train_.string() + " " +
                 write("ok.yaml", synthetic_config()).string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(
      r.err,
      "error: DPT_DEBUG_FAULT is read only by the test program train_faults (tests/train_faults.cpp), not by "
      "train\n");
  EXPECT_FALSE(fs::exists(dir_ / "run")) << "nothing was trained";
}

// Where the run trains on the CPU, cuda_graphs is refused.
TEST_F(TrainCli, CudaGraphsWithoutACudaDeviceIsOneLineAndExitCode2) {
#ifdef DPT_WITH_CUDA
  if (dpt::cuda::cuda_device_count() > 0)
    GTEST_SKIP() << "a CUDA device is present: this run could train on it";
#endif
  expect_clear_error(write("graphs.yaml", synthetic_config("cuda_graphs: true\n")).string(),
                     "cuda_graphs: true needs training on a CUDA device, but rank 0 trains on cpu");
  expect_clear_error(
      write("skip.yaml", synthetic_config("on_nonfinite: skip\n")).string() + " --set cuda_graphs=true",
      "cuda_graphs: true needs on_nonfinite: stop");
}

TEST_F(TrainCli, BadDataIsOneLineAndExitCode2) {
  std::string base = "model: {name: mlp}\nepochs: 1\noutput: {dir: " + (dir_ / "run").string() + "}\n";
  expect_clear_error(
      write("nodata.yaml", base + "dataset: {name: mnist, path: " + (dir_ / "nowhere").string() + "}\n")
          .string(),
      "nowhere");
  // A data directory whose training images are cut short.
  fs::create_directories(dir_ / "bad");
  for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                        "t10k-labels-idx1-ubyte"})
    std::ofstream(dir_ / "bad" / f) << std::string("\x00\x00\x08\x03\x00\x00\x00\x10", 8);
  expect_clear_error(
      write("bad.yaml", base + "dataset: {name: mnist, path: " + (dir_ / "bad").string() + "}\n").string(),
      "bad");
}

TEST_F(TrainCli, DataThatCannotTrainTheModelIsOneLineAndExitCode2) {
  std::string base =
      "model: {name: mlp}\nepochs: 1\nbatch_size: 2\noutput: {dir: " + (dir_ / "run").string() + "}\n";
  // Test images of another size than the training images: stopped before training, not at
  // the first evaluation.
  fs::create_directories(dir_ / "geometry");
  auto images = [](uint32_t count, uint32_t side) {
    std::string header("\x00\x00\x08\x03", 4);
    for (uint32_t v : {count, side, side})
      for (int shift = 24; shift >= 0; shift -= 8) header += static_cast<char>(v >> shift);
    return header + std::string(count * side * side, '\0');
  };
  auto labels = [](uint32_t count) {
    return std::string("\x00\x00\x08\x01\x00\x00\x00", 7) + char(count) + std::string(count, '\0');
  };
  std::ofstream(dir_ / "geometry" / "train-images-idx3-ubyte") << images(4, 28);
  std::ofstream(dir_ / "geometry" / "train-labels-idx1-ubyte") << labels(4);
  std::ofstream(dir_ / "geometry" / "t10k-images-idx3-ubyte") << images(2, 32);
  std::ofstream(dir_ / "geometry" / "t10k-labels-idx1-ubyte") << labels(2);
  expect_clear_error(
      write("geometry.yaml", base + "dataset: {name: mnist, path: " + (dir_ / "geometry").string() + "}\n")
          .string(),
      "the training set has 1x28x28 images, 10 classes but the test set has 1x32x32 images");
  // A synthetic dataset larger than the machine, and more threads than OpenMP can start.
  expect_clear_error(write("huge.yaml", synthetic_config()).string() +
                         " --set 'dataset={name: synthetic, shape: [1, 28, 28], size: 1000000000000}'",
                     "more than this machine's memory");
  expect_clear_error(write("threads.yaml", synthetic_config()).string() + " --set threads=100000", "threads");
}

TEST_F(TrainCli, OneFailingRankEndsEveryRankQuickly) {
  // Rank 0 trains on synthetic data and soon waits in a collective; rank 1 cannot find
  // its data. Both must end, non-zero, with rank 1's message, well within 30 s.
  std::string good = write("good.yaml", synthetic_config()).string();
  std::string bad = write("bad.yaml", synthetic_config()).string();
  std::string mpirun =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --bind-to none ";
  auto start = std::chrono::steady_clock::now();
  Result r = run(mpirun + "-np 1 " + train_.string() + " " + good + " : -np 1 " + train_.string() + " " +
                 bad + " --set 'dataset={name: mnist, path: " + (dir_ / "no_such_dir").string() + "}'");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(seconds, 30.0);
  EXPECT_THAT(r.err, HasSubstr("[rank 1] error:"));
  EXPECT_THAT(r.err, HasSubstr("no_such_dir"));
}

// Under mpirun a rank's stdout is a pseudo-terminal wherever mpirun's own output goes; the
// progress line asks where mpirun's goes (io/progress.cpp). Without DPT_TTY, a plain
// mpirun into a file writes whole lines and no carriage return; on a terminal (`script`
// gives mpirun one) the live line redraws at every step.
class PlainMpirun : public TrainCli {
 protected:
  std::string command() {
    return "env -u DPT_TTY OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe "
           "--bind-to none -np 2 " +
           train_.string() + " " + write("ok.yaml", synthetic_config()).string() +
           " --set epochs=1 --set log_every=4";  // 512 samples / (2 ranks x 32): 8 steps
  }
};

TEST_F(PlainMpirun, IntoAFileWritesPlainLines) {
  Result r = run(command());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\r'), 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("epoch 1/1  step 4/8  loss "));
  EXPECT_THAT(r.out, Not(HasSubstr("step 3/8"))) << "every step printed, not every log_every";
}

TEST_F(PlainMpirun, OnATerminalRedrawsTheLiveLine) {
  if (std::system("command -v script >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no `script` (util-linux) to give mpirun a terminal";
  const fs::path typescript = dir_ / "typescript";
  Result r = run("script -qec '" + command() + "' " + typescript.string());
  ASSERT_EQ(r.exit_code, 0) << r.err << read_file(typescript);
  EXPECT_THAT(read_file(typescript), HasSubstr("\repoch 1/1  step 3/8  loss "));
}

namespace {

// Two ranks training the synthetic config for a long time, each with its own --set.
// Whether process `pid` has exited: gone, or a zombie its parent (mpirun) has not reaped.
bool has_ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t name_end = line.rfind(')');  // "pid (comm) state ..."
  return name_end != std::string::npos && name_end + 2 < line.size() && line[name_end + 2] == 'Z';
}

std::string two_ranks(const fs::path& train, const std::string& config, const std::string& rank0,
                      const std::string& rank1) {
  const std::string each = train.string() + " " + config + " --set epochs=100000 --set log_every=1000 ";
  return "mpirun --oversubscribe --bind-to none -np 1 " + each + rank0 + " : -np 1 " + each + rank1;
}

}  // namespace

TEST_F(TrainCli, DebugCollectivesStopsRanksThatDisagreeAtTheCall) {
  // Rank 1 takes one step more per epoch: where rank 0 sums its epoch's loss (1 f32), rank 1
  // starts the step's stop vote (1 i64, max). Without the check this is undefined
  // behaviour in MPI (Open MPI may corrupt memory); with it both ranks stop at the call.
  std::string config = write("ok.yaml", synthetic_config()).string();
  dpt::testing::MpiJob job(two_ranks(train_, config, "--set debug=collectives --set max_steps_per_epoch=3",
                                     "--set debug=collectives --set max_steps_per_epoch=4"),
                           dir_);
  dpt::testing::JobResult r = job.finish(std::chrono::seconds(60));
  ASSERT_TRUE(r.finished) << r.err;
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_THAT(r.first_err_line(), ::testing::StartsWith("[rank ")) << r.err;
  EXPECT_THAT(r.first_err_line(), HasSubstr("] error: world: collective #")) << r.err;
  EXPECT_THAT(r.first_err_line(),
              HasSubstr(" differs between ranks (debug: collectives): rank 0 calls "
                        "all_reduce(sum) of 1 f32, rank 1 calls all_reduce(max) of 1 i64"))
      << r.err;
}

TEST_F(TrainCli, AHungRankIsNamedWhenTheTimeoutEndsTheRun) {
  // Rank 1 stops (SIGSTOP) mid-training: rank 0's next collective times out after
  // distributed.timeout_s and names it; rank 1's communication thread cannot answer either.
  std::string config = write("ok.yaml", synthetic_config()).string();
  dpt::testing::MpiJob job(
      two_ranks(train_, config, "--set distributed.timeout_s=2", "--set distributed.timeout_s=2"), dir_);
  ASSERT_TRUE(job.wait_for_output("epoch 1:", std::chrono::seconds(30)))
      << job.finish(std::chrono::seconds(5));
  const pid_t rank1 = job.rank_pid(1, std::chrono::seconds(10));
  ASSERT_GT(rank1, 0);
  job.mark();
  ::kill(rank1, SIGSTOP);
  dpt::testing::JobResult r = job.finish(std::chrono::seconds(60));
  ASSERT_TRUE(r.finished) << r.err;
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_GE(r.seconds, 2.0);
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_THAT(r.first_err_line(), ::testing::StartsWith("[rank 0] error: ")) << r.err;
  EXPECT_THAT(r.first_err_line(), HasSubstr(" on world (collective #")) << r.err;
  EXPECT_THAT(r.first_err_line(), HasSubstr("): not complete after 2 s")) << r.err;
  EXPECT_THAT(r.first_err_line(), HasSubstr("; no answer within 1.5 s from rank 1")) << r.err;
}

TEST_F(TrainCli, ASignalOnOneRankEndsEveryRank) {
  std::string config = write("ok.yaml", synthetic_config()).string();
  for (int signal : {SIGSEGV, SIGKILL}) {
    // A run directory of its own: the first job, killed after epoch 1, may have left a
    // checkpoint there, and train refuses to start afresh over an interrupted run's.
    const std::string run_dir = "--set output.dir=" + (dir_ / ("run_" + std::to_string(signal))).string();
    dpt::testing::MpiJob job(two_ranks(train_, config, run_dir, run_dir), dir_);
    ASSERT_TRUE(job.wait_for_output("epoch 1:", std::chrono::seconds(30)))
        << job.finish(std::chrono::seconds(5));
    const pid_t rank0 = job.rank_pid(0, std::chrono::seconds(10)), rank1 = job.rank_pid(1, std::chrono::seconds(10));
    ASSERT_GT(rank0, 0);
    ASSERT_GT(rank1, 0);
    job.mark();
    ::kill(rank1, signal);
    // dpt's part: rank 0 ends too, within seconds.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!has_ended(rank0) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(has_ended(rank0)) << "rank 0 still runs 30 s after rank 1 got signal " << signal;
    dpt::testing::JobResult r = job.finish(std::chrono::seconds(30));
    // Open MPI 4.1's mpirun can deadlock in its own teardown (PMIx_server_finalize, after a
    // "PMIX ERROR: UNREACHABLE") once every rank has ended: about 1 run in 10 here. What
    // follows checks mpirun's exit and report, which that run does not give.
    if (!r.finished && has_ended(rank0) && r.err.find("PMIX ERROR: UNREACHABLE") != std::string::npos)
      GTEST_SKIP() << "every rank ended, but mpirun hung in its PMIx teardown (an Open MPI race):\n" << r.err;
    ASSERT_TRUE(r.finished) << r.err;
    EXPECT_NE(r.exit_code, 0) << r.err;
    EXPECT_LT(r.seconds, 30.0);
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("[rank 0]"))) << r.err;
    if (signal == SIGSEGV) {
      EXPECT_EQ(r.first_err_line(), "[rank 1] fatal signal SIGSEGV (segmentation fault)") << r.err;
    } else {
      // mpirun names the killed rank, unless rank 0's own exit (its collective failed) is
      // what it notices first: seen once in ~20 runs under a busy ctest -j2.
      EXPECT_THAT(r.err, ::testing::AnyOf(::testing::AllOf(HasSubstr("process rank 1 with PID"),
                                                           HasSubstr("on signal 9 (Killed)")),
                                          HasSubstr("1 process returned\na non-zero exit code")))
          << r.err;
    }
  }
}
