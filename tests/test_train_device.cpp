// Where train runs (`device: auto | cpu | cuda`): the decision from every rank's view of
// its GPUs (any machine, faked), the config key, the train binary on this machine (device:
// cpu works; device: cuda without a GPU is one line and exit code 2; auto says what it
// picked), and, where a GPU is present, train on CUDA against train on the CPU and a
// stopped CUDA run resumed (those skip without one).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/storage.h"
#include "distributed/rank_device.h"
#include "error_of.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using namespace dpt;
using dpt::testing::error_of;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

dist::RankView gpu(int64_t count, int64_t index, int64_t uuid) { return {count, index, {uuid, 0}}; }
const dist::RankView kNoGpu{};

TEST(DeviceChoice, CpuIsTheCpuWhateverTheRanksSee) {
  dist::DeviceChoice c = dist::device_choose("cpu", false, {gpu(2, 0, 1), gpu(2, 1, 2)}, 1, "");
  EXPECT_TRUE(c.device.is_cpu());
  EXPECT_EQ(c.note, "device: cpu");
}

TEST(DeviceChoice, CudaGivesEachRankItsLocalRanksDevice) {
  std::vector<dist::RankView> views = {gpu(2, 0, 11), gpu(2, 1, 12), gpu(2, 0, 21), gpu(2, 1, 22)};
  for (int rank = 0; rank < 4; ++rank) {
    dist::DeviceChoice c = dist::device_choose("cuda", false, views, rank, "");
    EXPECT_EQ(c.device, Device::cuda(rank % 2));
    EXPECT_EQ(c.note, "device: cuda: rank 0 -> cuda:0, rank 1 -> cuda:1, rank 2 -> cuda:0, rank 3 -> cuda:1");
  }
}

TEST(DeviceChoice, CudaWithoutADeviceNamesTheRankAndTheReason) {
  std::string mine = error_of([] { dist::device_choose("cuda", false, {kNoGpu}, 0, "driver too old"); });
  EXPECT_EQ(mine, "device: cuda, but no CUDA device: driver too old (set device: cpu or auto)");
  std::string other = error_of([] { dist::device_choose("cuda", false, {gpu(1, 0, 5), kNoGpu}, 0, ""); });
  EXPECT_THAT(other, HasSubstr("rank 1 sees no CUDA device"));
}

TEST(DeviceChoice, CudaRefusesTwoRanksOnOneGpu) {
  // Three ranks on a two-GPU machine: rank 2 wraps around onto rank 0's GPU.
  std::vector<dist::RankView> views = {gpu(2, 0, 7), gpu(2, 1, 8), gpu(2, 0, 7)};
  std::string e = error_of([&] { dist::device_choose("cuda", false, views, 1, ""); });
  EXPECT_THAT(e, HasSubstr("ranks 0 and 2 would both use one GPU"));
  EXPECT_THAT(e, HasSubstr("NCCL needs a GPU for each rank"));
  EXPECT_THAT(e, HasSubstr("GPU-07000000-0000-0000"));
}

TEST(DeviceChoice, OneGpuPerRankThroughVisibleDevicesIsFine) {
  // A launcher gave each rank one GPU (CUDA_VISIBLE_DEVICES): all are cuda:0, all differ.
  std::vector<dist::RankView> views = {gpu(1, 0, 1), gpu(1, 0, 2), gpu(1, 0, 3)};
  EXPECT_EQ(dist::device_choose("cuda", false, views, 2, "").device, Device::cuda(0));
  EXPECT_TRUE(dist::device_choose("auto", false, views, 2, "").device.is_cuda());
}

TEST(DeviceChoice, AutoTakesTheGpuOnlyWhereEveryRankCanHaveOne) {
  dist::DeviceChoice ok = dist::device_choose("auto", false, {gpu(2, 0, 1), gpu(2, 1, 2)}, 1, "");
  EXPECT_EQ(ok.device, Device::cuda(1));
  EXPECT_EQ(ok.note, "device: auto -> cuda: rank 0 -> cuda:0, rank 1 -> cuda:1");

  dist::DeviceChoice none = dist::device_choose("auto", false, {kNoGpu}, 0, "no driver");
  EXPECT_TRUE(none.device.is_cpu());
  EXPECT_EQ(none.note, "device: auto -> cpu (no CUDA device: no driver)");

  dist::DeviceChoice partly = dist::device_choose("auto", false, {gpu(1, 0, 1), kNoGpu}, 0, "");
  EXPECT_TRUE(partly.device.is_cpu());
  EXPECT_THAT(partly.note, HasSubstr("rank 1 sees no CUDA device"));

  dist::DeviceChoice shared = dist::device_choose("auto", false, {gpu(1, 0, 4), gpu(1, 0, 4)}, 1, "");
  EXPECT_TRUE(shared.device.is_cpu());
  EXPECT_THAT(shared.note, HasSubstr("ranks 0 and 1 would both use one GPU"));

  dist::DeviceChoice deterministic = dist::device_choose("auto", true, {gpu(1, 0, 1)}, 0, "");
  EXPECT_TRUE(deterministic.device.is_cpu());
  EXPECT_THAT(deterministic.note, HasSubstr("deterministic: true is a CPU guarantee"));
  // Asked for explicitly, the GPU is used anyway, with a word on what is not guaranteed.
  dist::DeviceChoice forced = dist::device_choose("cuda", true, {gpu(1, 0, 1)}, 0, "");
  EXPECT_EQ(forced.device, Device::cuda(0));
  EXPECT_THAT(forced.note, HasSubstr("not CUDA runs"));
}

TEST(DeviceChoice, LongRankListsAreCut) {
  std::vector<dist::RankView> views;
  for (int r = 0; r < 16; ++r) views.push_back(gpu(8, r % 8, 100 + r));
  std::string note = dist::device_choose("cuda", false, views, 0, "").note;
  EXPECT_THAT(note, HasSubstr("rank 7 -> cuda:7, ... (16 ranks)"));
  EXPECT_THAT(note, Not(HasSubstr("rank 8 ->")));
}

TEST(DeviceCount, CpuIsOneAndCudaIsZeroExactlyWhenThereIsAReason) {
  EXPECT_EQ(device_count(DeviceType::cpu), 1);
  const int cuda = device_count(DeviceType::cuda);
  EXPECT_GE(cuda, 0);
  EXPECT_EQ(cuda == 0, !device_unavailable_reason(DeviceType::cuda).empty())
      << device_unavailable_reason(DeviceType::cuda);
}

TEST(DeviceConfig, KeyTakesAutoCpuCudaAndRejectsTheRest) {
  dpt::testing::TempDir dir("dpt_device_config");
  const std::string path = dir.file("c.yaml");
  std::ofstream(path) << "model: {name: mlp}\n";
  EXPECT_EQ(io::load_config(path).device, "auto");
  for (const char* value : {"auto", "cpu", "cuda"}) {
    io::Config c = io::load_config(path, {std::string("device=") + value});
    EXPECT_EQ(c.device, value);
    EXPECT_THAT(io::config_to_yaml(c), HasSubstr(std::string("device: ") + value));
  }
  EXPECT_THAT(error_of([&] { io::load_config(path, {"device=cuda:1"}); }),
              HasSubstr("key 'device': unknown device 'cuda:1' (expected one of: auto, cpu, cuda)"));
  EXPECT_THAT(error_of([&] { io::load_config(path, {"device=[cuda]"}); }), HasSubstr("device"));
}

// --- the train binary

struct Result {
  int exit_code;
  std::string out, err;
};

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class TrainDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* build = std::getenv("DPT_BUILD_DIR");
    train_ = fs::path(build ? build : ".") / "train";
    ASSERT_TRUE(fs::exists(train_)) << train_ << " not built (DPT_BUILD_DIR)";
  }

  Result train(const std::string& config, const std::string& args = "") {
    const std::string path = dir_.file("config.yaml");
    std::ofstream(path) << config;
    const std::string cmd = train_.string() + " " + path + " " + args + " >" + dir_.file("out") + " 2>" +
                            dir_.file("err");
    int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_all(dir_.file("out")), read_all(dir_.file("err"))};
  }

  // A small ResNet with batch norm, dropout-free, on synthetic 3x16x16 data: conv, BN,
  // pooling, the loss and SGD with momentum, an EMA and augmentation all take part.
  std::string config(const std::string& run, const std::string& extra = "") {
    return "model: {name: resnet_cifar, depth: 8}\n"
           "dataset: {name: synthetic, shape: [3, 16, 16], classes: 4, size: 384, augment: true}\n"
           "epochs: 2\nbatch_size: 32\neval_batch_size: 64\nthreads: 1\nema_decay: 0.9\n"
           "optimizer: {name: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 5.0e-4}\n"
           "output: {dir: " + dir_.file(run) + "}\n" + extra;
  }

  // metrics.jsonl's values of `key`, one per epoch.
  std::vector<double> metric(const std::string& run, const std::string& key) {
    std::vector<double> values;
    std::ifstream in(dir_.file(run) + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      size_t at = line.find("\"" + key + "\": ");
      if (at != std::string::npos) values.push_back(std::stod(line.substr(at + key.size() + 4)));
    }
    return values;
  }

  static bool have_gpu() { return device_count(DeviceType::cuda) > 0; }

  // A run's model.safetensors as (name, values), in the file's order.
  std::vector<std::pair<std::string, std::vector<float>>> weights(const std::string& run) {
    io::SafetensorsFile file = io::safetensors_read(dir_.file(run) + "/model.safetensors");
    std::vector<std::pair<std::string, std::vector<float>>> out;
    for (const io::SafetensorsEntry& e : file.view.tensors) out.emplace_back(e.name, file.tensor(e).to_vector());
    return out;
  }

  void expect_weights_close(const std::string& got_run, const std::string& want_run, double rtol, double atol) {
    auto got = weights(got_run), want = weights(want_run);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].first, want[i].first);
      const std::vector<float>&a = want[i].second, &b = got[i].second;
      for (size_t k = 0; k < a.size(); ++k)
        ASSERT_NEAR(b[k], a[k], rtol * std::abs(a[k]) + atol) << want[i].first << "[" << k << "]";
    }
  }

  dpt::testing::TempDir dir_{"dpt_train_device"};
  fs::path train_;
};

TEST_F(TrainDevice, ExplicitCpuTrains) {
  Result r = train(config("cpu", "device: cpu\n"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("device: cpu\n"));
  EXPECT_EQ(metric("cpu", "train_loss").size(), 2u);
}

TEST_F(TrainDevice, AutoSaysWhatItPicked) {
  Result r = train(config("auto"), "--set epochs=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (have_gpu()) {
    EXPECT_THAT(r.out, HasSubstr("device: auto -> cuda: rank 0 -> cuda:0"));
  } else {
    EXPECT_THAT(r.out, HasSubstr("device: auto -> cpu (no CUDA device: " +
                                 device_unavailable_reason(DeviceType::cuda) + ")"));
  }
}

TEST_F(TrainDevice, CudaWithoutAGpuIsOneLineAndExitCode2) {
  if (have_gpu()) GTEST_SKIP() << "this machine has a CUDA device";
  Result r = train(config("cuda", "device: cuda\n"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "error: device: cuda, but no CUDA device: " + device_unavailable_reason(DeviceType::cuda) +
                       " (set device: cpu or auto)\n");
  EXPECT_FALSE(fs::exists(dir_.file("cuda") + "/metrics.jsonl"));
}

TEST_F(TrainDevice, BadDeviceValuesAreOneLineAndExitCode2) {
  for (const char* bad : {"gpu", "cuda:0", "[cuda]"}) {
    Result r = train(config("bad"), std::string("--set device=") + bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_THAT(r.err, HasSubstr("key 'device'")) << bad;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// --- on a GPU

void expect_curves_close(const std::vector<double>& gpu, const std::vector<double>& cpu, double rtol,
                         const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(gpu[i], cpu[i], rtol * std::abs(cpu[i]) + 1e-4) << what << " at epoch " << i + 1;
}

TEST_F(TrainDevice, CudaRunFollowsTheCpuRunsLossCurve) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << device_unavailable_reason(DeviceType::cuda);
  Result cpu = train(config("cpu", "device: cpu\n"));
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  Result gpu = train(config("gpu", "device: cuda\n"));
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  EXPECT_THAT(gpu.out, HasSubstr("device: cuda: rank 0 -> cuda:0"));
  // 24 SGD steps through batch norm: f32 summation orders differ (cuDNN, oneDNN), little else.
  expect_curves_close(metric("gpu", "train_loss"), metric("cpu", "train_loss"), 2e-3, "train_loss");
  expect_curves_close(metric("gpu", "test_loss"), metric("cpu", "test_loss"), 5e-3, "test_loss");
  std::vector<double> acc_gpu = metric("gpu", "test_acc"), acc_cpu = metric("cpu", "test_acc");
  ASSERT_EQ(acc_gpu.size(), 2u);
  EXPECT_NEAR(acc_gpu[1], acc_cpu[1], 2.0 / 64);  // a sample or two of the 64 may flip
  // The final weights, saved from the device, against the CPU run's.
  expect_weights_close("gpu", "cpu", 1e-2, 1e-3);
}

TEST_F(TrainDevice, CudaRunStoppedAndResumedEndsWhereAnUninterruptedOneDoes) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << device_unavailable_reason(DeviceType::cuda);
  Result whole = train(config("whole", "device: cuda\n"));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  // The same run stopped by SIGTERM as step 16 begins (epoch 2 of 12-step epochs, so a
  // mid-epoch checkpoint: momentum, EMA, position), then resumed on the GPU.
  ASSERT_EQ(setenv("DPT_DEBUG_FAULT", "sigterm@16", 1), 0);
  Result cut = train(config("cut", "device: cuda\n"));
  unsetenv("DPT_DEBUG_FAULT");
  EXPECT_EQ(cut.exit_code, 143) << cut.err;
  Result resumed = train(config("cut", "device: cuda\n"), "--resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("resumed from"));
  // Not bit for bit: cuDNN may pick algorithms whose sums are ordered by the hardware.
  expect_curves_close(metric("cut", "train_loss"), metric("whole", "train_loss"), 1e-3, "train_loss");
  expect_weights_close("cut", "whole", 1e-3, 1e-5);
}

}  // namespace
