// Checkpoints end to end, through the train binary: a rank killed mid-epoch ends the run
// quickly and --resume auto finishes it with the same final parameters, bit for bit, as a
// run never interrupted (deterministic mode); so does a SIGTERM, on 2 and on 3 ranks, also
// where only rank 0 sees the checkpoint (as on a cluster without a shared filesystem); a
// checkpoint from 2 ranks resumes on 1; a full disk leaves the previous checkpoint intact;
// a NaN stops every rank at the same step (or is skipped); a bad checkpoint is one error
// line and exit code 2.
// The faults come from DPT_DEBUG_FAULT, read by the test program train_faults (train's own
// program with them as its step hook: fault_injection.h), so they land mid-epoch at a known
// step however fast the machine is; the runs that resume, and the references, are train's.
// FaultInjection's own test checks how the variable is read.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/threading.h"
#include "error_of.h"
#include "fault_injection.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/registry.h"
#include "optim/sgd.h"

namespace fs = std::filesystem;
using namespace dpt;
using dpt::io::read_file;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

struct Result {
  int exit_code;
  std::string out, err;
  double seconds;
};

// 2 ranks x 16 steps of 16 per epoch, 3 epochs: step S is in epoch (S - 1) / 16 + 1.
// Dropout, augmentation, momentum, a cosine schedule and an EMA all carry state across
// a resume.
const char* kConfig =
    "model: {name: mlp, hidden: [32], dropout: 0.2}\n"
    "dataset: {name: synthetic, shape: [1, 8, 8], classes: 4, size: 512, augment: true}\n"
    "epochs: 3\nbatch_size: 16\nthreads: 1\nseed: 3\ndeterministic: true\nema_decay: 0.9\n"
    "optimizer: {name: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 1.0e-4}\n"
    "schedule: {name: cosine, warmup_epochs: 1}\n"
    "checkpoint: {every_epochs: 1, keep_last: 2}\n";

class TrainCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* build = std::getenv("DPT_BUILD_DIR");
    train_ = (fs::path(build ? build : ".") / "train").string();
    train_faults_ = (fs::path(build ? build : ".") / "train_faults").string();
    dir_ = fs::temp_directory_path() / ("dpt_train_ckpt_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "c.yaml") << kConfig;
  }
  static void TearDownTestSuite() {
    std::system(("umount " + (dir_ / "disk").string() + " 2>/dev/null").c_str());
    fs::remove_all(dir_);
  }
  void SetUp() override {
    for (const std::string& program : {train_, train_faults_})
      ASSERT_TRUE(fs::exists(program)) << program << " not built (DPT_BUILD_DIR)";
  }

  static Result run(const std::string& command) {
    const std::string out = (dir_ / "stdout").string(), err = (dir_ / "stderr").string();
    auto start = std::chrono::steady_clock::now();
    int status = std::system((command + " >" + out + " 2>" + err).c_str());
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err), seconds};
  }

  // `train c.yaml` with its output in dir_/name, on `np` ranks (1: no mpirun); with
  // `faults` (DPT_DEBUG_FAULT's value, fault_injection.h) train_faults instead.
  static Result train(const std::string& name, int np, const std::string& args = "",
                      const std::string& faults = "") {
    std::string cmd = faults.empty() ? "" : "DPT_DEBUG_FAULT=" + faults + " ";
    if (np > 1)
      cmd +=
          "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --bind-to none "
          "-np " +
          std::to_string(np) + " ";
    return run(cmd + (faults.empty() ? train_ : train_faults_) + " " + (dir_ / "c.yaml").string() +
               " --set output.dir=" + (dir_ / name).string() + " " + args);
  }

  // The final parameters of an uninterrupted run on `np` ranks, made once per suite.
  static const std::string& reference(int np) {
    static std::map<int, std::string> made;
    if (!made.count(np)) {
      Result r = train("reference" + std::to_string(np), np);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      made[np] = read_file(dir_ / ("reference" + std::to_string(np)) / "model.safetensors");
    }
    return made[np];
  }

  static fs::path path(const std::string& name) { return dir_ / name; }

  static std::string train_, train_faults_;
  static fs::path dir_;
};

std::string TrainCheckpoint::train_, TrainCheckpoint::train_faults_;
fs::path TrainCheckpoint::dir_;

int lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

}  // namespace

TEST(FaultInjection, ParsesItsVariableForEachRank) {
  const dpt::testing::FaultInjection f("nan@5:1,sigterm@9,nan@7:0,nan@8");
  EXPECT_TRUE(f.nan_at(5, 1));
  EXPECT_FALSE(f.nan_at(5, 0));  // rank 1's
  EXPECT_TRUE(f.nan_at(7, 0));
  EXPECT_FALSE(f.nan_at(7, 1));
  EXPECT_TRUE(f.nan_at(8, 0) && f.nan_at(8, 3));  // every rank's
  EXPECT_FALSE(f.nan_at(9, 0));                   // a signal, not a NaN
  EXPECT_THAT(dpt::testing::error_of([] { dpt::testing::FaultInjection("nan@x"); }),
              HasSubstr("DPT_DEBUG_FAULT=nan@x: expected KIND@STEP[:RANK]"));
  EXPECT_THAT(dpt::testing::error_of([] { dpt::testing::FaultInjection("segv@3"); }),
              HasSubstr("got 'segv@3'"));
}

TEST_F(TrainCheckpoint, ASlowedRankIsNamedAsAStraggler) {
  // Rank 1 sleeps 40 ms before each step's forward from step 1 on: its forward phase grows
  // by that, rank 0 waits for it in its all-reduces (comm_wait), and the report every
  // log_every steps names rank 1, its host and the phase.
  Result r = train("slow", 2, "--set epochs=1 --set log_every=8", "slow@1:1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("straggler: rank 1 (host "));
  EXPECT_THAT(r.out, HasSubstr("a step vs median "));
  EXPECT_THAT(r.out, HasSubstr(": forward "));
  EXPECT_THAT(r.out, Not(HasSubstr("straggler: rank 0")));
  const std::string summary = read_file(path("slow/summary.json"));
  EXPECT_THAT(summary, HasSubstr("\"stragglers\": [\n    \"straggler: rank 1 (host "));
  EXPECT_THAT(summary, HasSubstr("\"work_ms\""));
}

TEST_F(TrainCheckpoint, KilledRankEndsTheRunAndResumeAutoFinishesItBitForBit) {
  // Rank 1 is killed as step 24 (epoch 2 of 3) begins; rank 0 is then in a collective.
  Result killed = train("killed", 2, "", "sigkill@24:1");
  EXPECT_NE(killed.exit_code, 0);
  EXPECT_LT(killed.seconds, 30.0) << "the surviving rank did not end";
  EXPECT_EQ(io::checkpoint_steps(path("killed/checkpoints").string()), (std::vector<int64_t>{16}));
  EXPECT_FALSE(fs::exists(path("killed/model.safetensors")));

  Result resumed = train("killed", 2, "--resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("resumed from " + path("killed/checkpoints/step-16.json").string() +
                                     ": step 16, epoch 2, step 0 of the epoch"));
  EXPECT_EQ(lines(read_file(path("killed/metrics.jsonl"))), 3);
  EXPECT_TRUE(read_file(path("killed/model.safetensors")) == reference(2)) << "final parameters differ";
  EXPECT_EQ(io::checkpoint_steps(path("killed/checkpoints").string()), (std::vector<int64_t>{32, 48}));
}

TEST_F(TrainCheckpoint, SigtermOnOneRankCheckpointsMidEpochAndResumesBitForBit) {
  Result stopped = train("stopped", 2, "", "sigterm@20:0");
  EXPECT_EQ(stopped.exit_code, 128 + 15) << stopped.err;
  EXPECT_THAT(stopped.out, HasSubstr("signal 15: stopping after step 20"));
  EXPECT_EQ(io::checkpoint_steps(path("stopped/checkpoints").string()), (std::vector<int64_t>{16, 20}));
  Result resumed = train("stopped", 2, "--resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("step 20, epoch 2, step 4 of the epoch"));
  EXPECT_TRUE(read_file(path("stopped/model.safetensors")) == reference(2)) << "final parameters differ";
}

TEST_F(TrainCheckpoint, SigtermOnThreeRanksCheckpointsMidEpochAndResumesBitForBit) {
  // 512 samples over 3 ranks: padded shards of 171, so 10 steps of 16 per epoch; an
  // all-reduce sums three values, and the rest of the epoch is each rank's shard after
  // the 5 x 16 x 3 samples already trained on.
  Result stopped = train("stopped3", 3, "", "sigterm@15:2");
  EXPECT_EQ(stopped.exit_code, 128 + 15) << stopped.err;
  EXPECT_EQ(io::checkpoint_steps(path("stopped3/checkpoints").string()), (std::vector<int64_t>{10, 15}));
  Result resumed = train("stopped3", 3, "--resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("step 15, epoch 2, step 5 of the epoch"));
  EXPECT_EQ(lines(read_file(path("stopped3/metrics.jsonl"))), 3);
  EXPECT_TRUE(read_file(path("stopped3/model.safetensors")) == reference(3)) << "final parameters differ";
}

TEST_F(TrainCheckpoint, ResumeLoadsRankZerosCheckpointWhereTheOtherRanksCannotSeeIt) {
  // On a cluster the output directory may be on rank 0's host only: here rank 1's
  // output.dir is an empty directory of its own, as another host's disk would be, and the
  // run still resumes where rank 0's checkpoint says, bit for bit.
  Result stopped = train("apart", 2, "", "sigterm@20:0");
  ASSERT_EQ(stopped.exit_code, 128 + 15) << stopped.err;
  const std::string each = train_ + " " + (dir_ / "c.yaml").string() +
                           " --resume auto --set distributed.timeout_s=60 --set output.dir=";
  Result resumed =
      run("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --bind-to none "
          "-np 1 " +
          each + path("apart").string() + " : -np 1 " + each + path("elsewhere").string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("step 20, epoch 2, step 4 of the epoch"));
  EXPECT_TRUE(read_file(path("apart/model.safetensors")) == reference(2)) << "final parameters differ";
  EXPECT_FALSE(fs::exists(path("elsewhere"))) << "only rank 0 writes";
}

TEST_F(TrainCheckpoint, TwoRankCheckpointResumesOnOneRank) {
  Result stopped = train("shrink", 2, "", "sigterm@20");
  ASSERT_EQ(stopped.exit_code, 128 + 15) << stopped.err;
  Result resumed = train("shrink", 1, "--resume " + path("shrink/checkpoints/step-20.safetensors").string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.out,
              HasSubstr("resumed with 1 rank(s) x batch 16; the checkpoint had 2 x 16: the data order "
                        "follows the new world size"));
  // Epoch 2 goes on from sample 20 x 16 ... of its order: 8 of 32 one-rank steps were done.
  EXPECT_THAT(resumed.out, HasSubstr("checkpoint " + path("shrink/checkpoints/step-44.json").string()));
  EXPECT_THAT(resumed.out, HasSubstr("epoch 3: "));
  EXPECT_EQ(lines(read_file(path("shrink/metrics.jsonl"))), 3);
  EXPECT_THAT(read_file(path("shrink/summary.json")), HasSubstr("\"world_size\": 1"));
}

TEST_F(TrainCheckpoint, DeterministicRunsRepeatExactlyOnThreeRanks) {
  // Three ranks: an all-reduce sums three values, so the order of the sum matters.
  Result a = train("three_a", 3, "--set epochs=1"), b = train("three_b", 3, "--set epochs=1");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(read_file(path("three_a/model.safetensors")) == read_file(path("three_b/model.safetensors")));
}

TEST_F(TrainCheckpoint, DeterministicResumeTakesTheCheckpointsThreadCount) {
  // mnist_cnn's convolutions give other bits with 1 thread than with 2 (oneDNN splits its
  // sums by thread), so a resumed run left to choose (threads: 0, all cores) must take the
  // one thread of the checkpoint's run to end where that run would have.
  const std::string cnn =
      "--set 'model={name: mnist_cnn}' --set 'dataset={name: synthetic, shape: [1, 12, 12], classes: 4, "
      "size: 256}' "
      "--set threads=1 --set epochs=2 --set dataset.augment=true";
  Result whole = train("cnn_whole", 1, cnn);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  Result stopped = train("cnn", 1, cnn, "sigterm@11");
  ASSERT_EQ(stopped.exit_code, 128 + 15) << stopped.err;
  Result resumed = train("cnn", 1, cnn + " --set threads=0 --resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  if (threads_available() > 1) {
    EXPECT_THAT(resumed.out, HasSubstr("deterministic: 1 threads per rank, as in the checkpoint's run"));
  }
  EXPECT_TRUE(read_file(path("cnn/model.safetensors")) == read_file(path("cnn_whole/model.safetensors")));
}

TEST_F(TrainCheckpoint, FullDiskKeepsThePreviousCheckpointAndSaysWhy) {
  // A run dies in epoch 2 after its first checkpoint (a 140 KB model file and a 280 KB file
  // of momentum and EMA); the resumed run cannot write the next one: its directory is on a
  // 700 KB tmpfs, or, without the right to mount, the next model file's temporary is a
  // link to /dev/full, whose writes the kernel answers with ENOSPC as well.
  const fs::path disk = path("disk");
  fs::create_directories(disk);
  const bool mounted =
      std::system(("mount -t tmpfs -o size=700k tmpfs " + disk.string() + " 2>/dev/null").c_str()) == 0;
  std::printf("full disk: %s\n", mounted ? "a 700 KB tmpfs" : "a link to /dev/full (mount not permitted)");
  const std::string big = "--set model.hidden=[512] --set output.dir=" + (disk / "run").string();
  Result died = train("unused", 1, big, "sigkill@40");
  EXPECT_NE(died.exit_code, 0);
  if (!mounted) fs::create_symlink("/dev/full", disk / "run/checkpoints/step-64.safetensors.tmp");
  Result r = train("unused", 1, big + " --resume auto");
  const std::string ckpt = (disk / "run/checkpoints").string();
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(ckpt)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  std::error_code ec;
  fs::create_directories(path("roomy"));
  fs::copy(ckpt, path("roomy/checkpoints"), ec);
  if (mounted) std::system(("umount " + disk.string()).c_str());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("error: checkpoint step-64 not saved: "));
  EXPECT_THAT(r.err, HasSubstr("No space left on device"));
  EXPECT_THAT(r.err, HasSubstr("the last complete checkpoint is " + ckpt + "/step-32.json"));
  EXPECT_EQ(files, (std::vector<std::string>{"step-32.json", "step-32.optimizer.safetensors",
                                             "step-32.safetensors"}));

  // The previous checkpoint is whole: moved to a disk with room, the run resumes from it
  // and ends where an uninterrupted one-rank run does, bit for bit.
  ASSERT_FALSE(ec) << ec.message();
  Result resumed = train("roomy", 1, "--set model.hidden=[512] --resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  Result whole = train("whole", 1, "--set model.hidden=[512]");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_TRUE(read_file(path("roomy/model.safetensors")) == read_file(path("whole/model.safetensors")));
}

TEST_F(TrainCheckpoint, NonFiniteGradientsStopEveryRankAndKeepTheLastGoodCheckpoint) {
  // Only rank 1's loss is NaN; the all-reduced gradients carry it to rank 0 as well.
  Result r = train("nan", 2, "", "nan@20:1");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("error: step 20 (epoch 2, step 4 of 16): non-finite gradients"));
  EXPECT_THAT(r.err,
              HasSubstr("the last good checkpoint is " + path("nan/checkpoints/step-16.json").string()));
  EXPECT_EQ(io::checkpoint_steps(path("nan/checkpoints").string()), (std::vector<int64_t>{16}));
  // That checkpoint loads, and its weights are finite.
  nn::ModulePtr model =
      models::build_model(YAML::Load("{name: mlp, hidden: [32], dropout: 0.2}"), {1, 8, 8, 4, 3});
  optim::Sgd sgd(optim::param_groups(*model, 0, true), {0.9f, true});
  optim::Ema ema(*model, 0.9f);
  io::checkpoint_load(path("nan/checkpoints/step-16.json").string(), {*model, "mlp", sgd, "sgd", &ema});
  for (const auto& [name, t] : model->state_dict())
    for (float v : t.to_vector()) ASSERT_TRUE(std::isfinite(v)) << name;

  Result skipped = train("skip", 2, "--set on_nonfinite=skip", "nan@20:1");
  ASSERT_EQ(skipped.exit_code, 0) << skipped.err;
  EXPECT_THAT(skipped.err, HasSubstr("warning: step 20 (epoch 2, step 4 of 16): non-finite gradients"));
  EXPECT_THAT(skipped.err, HasSubstr("step skipped"));
  EXPECT_THAT(read_file(path("skip/summary.json")), HasSubstr("\"skipped_steps\": 1"));
  io::SafetensorsFile final_model = io::safetensors_read(path("skip/model.safetensors").string());
  for (const auto& e : final_model.view.tensors)
    for (float v : final_model.tensor(e).to_vector()) ASSERT_TRUE(std::isfinite(v)) << e.name;
}

TEST_F(TrainCheckpoint, BadCheckpointsAreOneLineAndExitCode2) {
  Result made = train("bad", 1, "--set epochs=1");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const fs::path json = path("bad/checkpoints/step-32.json"),
                 model = path("bad/checkpoints/step-32.safetensors");
  const std::string json_text = read_file(json), model_bytes = read_file(model);
  auto expect_error = [&](const std::string& args, const std::string& needle) {
    Result r = train("bad", 1, "--resume " + json.string() + " " + args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr(needle));
  };
  expect_error("--set model.hidden=[16]",
               model.string() + ": tensor '1.weight' has shape [32, 64], the model 'mlp' expects [16, 64]");
  expect_error("--set 'model={name: mnist_cnn}'",
               "a checkpoint of model 'mlp', but the config's model is 'mnist_cnn'");
  std::ofstream(model, std::ios::binary) << model_bytes.substr(0, model_bytes.size() / 2);
  expect_error("", model.string() + ": tensor '");
  std::ofstream(model, std::ios::binary) << model_bytes;
  std::string no_step = json_text;
  no_step.replace(no_step.find("\"step\": "), 6, "\"stop\"");
  std::ofstream(json) << no_step;
  expect_error("", json.string() + ": missing key 'position.step'");
  expect_error("--set epochs=2 --resume nowhere.json", "--resume nowhere.json: ");
  // A fresh run where an interrupted one (no summary.json) left checkpoints.
  fs::remove(path("bad/summary.json"));
  Result again = train("bad", 1);
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_THAT(
      again.err,
      HasSubstr(path("bad/checkpoints").string() +
                " holds checkpoints of an interrupted earlier run (the newest is step-32.json): continue "
                "it with --resume auto"));
}

TEST_F(TrainCheckpoint, AFreshRunReplacesAFinishedRunsCheckpoints) {
  Result first = train("twice", 1, "--set epochs=2");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(io::checkpoint_steps(path("twice/checkpoints").string()), (std::vector<int64_t>{32, 64}));
  Result second = train("twice", 1, "--set epochs=1");
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_THAT(second.out, HasSubstr("starting afresh: removed the checkpoints of the finished earlier run"));
  EXPECT_EQ(io::checkpoint_steps(path("twice/checkpoints").string()), (std::vector<int64_t>{32}));
}
