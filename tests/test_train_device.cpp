// Where train runs (`device: auto | cpu | cuda`): the decision from every rank's view of
// its GPUs (any machine, faked), the config key, and the train binary on this machine
// (device: cpu works; device: cuda without a GPU is one line and exit code 2; auto says
// what it picked). Training on a GPU: test_cuda_train_run.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "core/storage.h"
#include "comm/rank_device.h"
#include "error_of.h"
#include "io/config.h"
#include "temp_dir.h"
#include "train_runner.h"

namespace fs = std::filesystem;
using namespace dpt;
using dpt::testing::error_of;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

dist::RankView gpu(int64_t count, int64_t index, unsigned char uuid) { return {count, index, {uuid}}; }
const dist::RankView kNoGpu{};

TEST(DeviceChoice, CpuIsTheCpuWhateverTheRanksSee) {
  dist::DeviceChoice c =
      dist::device_choose(dist::DeviceSetting::cpu, false, {gpu(2, 0, 1), gpu(2, 1, 2)}, 1, "");
  EXPECT_TRUE(c.device.is_cpu());
  EXPECT_EQ(c.note, "device: cpu");
}

TEST(DeviceChoice, CudaGivesEachRankItsLocalRanksDevice) {
  std::vector<dist::RankView> views = {gpu(2, 0, 11), gpu(2, 1, 12), gpu(2, 0, 21), gpu(2, 1, 22)};
  for (int rank = 0; rank < 4; ++rank) {
    dist::DeviceChoice c = dist::device_choose(dist::DeviceSetting::cuda, false, views, rank, "");
    EXPECT_EQ(c.device, Device::cuda(rank % 2));
    EXPECT_EQ(c.note, "device: cuda: rank 0 -> cuda:0, rank 1 -> cuda:1, rank 2 -> cuda:0, rank 3 -> cuda:1");
  }
}

TEST(DeviceChoice, CudaWithoutADeviceNamesTheRankAndTheReason) {
  std::string mine =
      error_of([] { dist::device_choose(dist::DeviceSetting::cuda, false, {kNoGpu}, 0, "driver too old"); });
  EXPECT_EQ(mine, "device: cuda, but no CUDA device: driver too old (set device: cpu or auto)");
  std::string other = error_of([] {
    dist::device_choose(dist::DeviceSetting::cuda, false, {gpu(1, 0, 5), kNoGpu}, 0, "");
  });
  EXPECT_THAT(other, HasSubstr("rank 1 sees no CUDA device"));
}

TEST(DeviceChoice, CudaRefusesTwoRanksOnOneGpu) {
  // Three ranks on a two-GPU machine: rank 2 wraps around onto rank 0's GPU.
  std::vector<dist::RankView> views = {gpu(2, 0, 7), gpu(2, 1, 8), gpu(2, 0, 7)};
  std::string e = error_of([&] { dist::device_choose(dist::DeviceSetting::cuda, false, views, 1, ""); });
  EXPECT_THAT(e, HasSubstr("ranks 0 and 2 would both use one GPU"));
  EXPECT_THAT(e, HasSubstr("NCCL needs a GPU for each rank"));
  EXPECT_THAT(e, HasSubstr("GPU-07000000-0000-0000"));
}

TEST(DeviceChoice, OneGpuPerRankThroughVisibleDevicesIsFine) {
  // A launcher gave each rank one GPU (CUDA_VISIBLE_DEVICES): all are cuda:0, all differ.
  std::vector<dist::RankView> views = {gpu(1, 0, 1), gpu(1, 0, 2), gpu(1, 0, 3)};
  EXPECT_EQ(dist::device_choose(dist::DeviceSetting::cuda, false, views, 2, "").device, Device::cuda(0));
  EXPECT_TRUE(dist::device_choose(dist::DeviceSetting::automatic, false, views, 2, "").device.is_cuda());
}

TEST(DeviceChoice, AutoTakesTheGpuOnlyWhereEveryRankCanHaveOne) {
  dist::DeviceChoice ok =
      dist::device_choose(dist::DeviceSetting::automatic, false, {gpu(2, 0, 1), gpu(2, 1, 2)}, 1, "");
  EXPECT_EQ(ok.device, Device::cuda(1));
  EXPECT_EQ(ok.note, "device: auto -> cuda: rank 0 -> cuda:0, rank 1 -> cuda:1");

  dist::DeviceChoice none =
      dist::device_choose(dist::DeviceSetting::automatic, false, {kNoGpu}, 0, "no driver");
  EXPECT_TRUE(none.device.is_cpu());
  EXPECT_EQ(none.note, "device: auto -> cpu (no CUDA device: no driver)");

  dist::DeviceChoice partly =
      dist::device_choose(dist::DeviceSetting::automatic, false, {gpu(1, 0, 1), kNoGpu}, 0, "");
  EXPECT_TRUE(partly.device.is_cpu());
  EXPECT_THAT(partly.note, HasSubstr("rank 1 sees no CUDA device"));

  dist::DeviceChoice shared =
      dist::device_choose(dist::DeviceSetting::automatic, false, {gpu(1, 0, 4), gpu(1, 0, 4)}, 1, "");
  EXPECT_TRUE(shared.device.is_cpu());
  EXPECT_THAT(shared.note, HasSubstr("ranks 0 and 1 would both use one GPU"));

  dist::DeviceChoice deterministic =
      dist::device_choose(dist::DeviceSetting::automatic, true, {gpu(1, 0, 1)}, 0, "");
  EXPECT_TRUE(deterministic.device.is_cpu());
  EXPECT_THAT(deterministic.note, HasSubstr("deterministic: true is a CPU guarantee"));
  // Asked for explicitly, the GPU is used anyway, with a word on what is not guaranteed.
  dist::DeviceChoice forced = dist::device_choose(dist::DeviceSetting::cuda, true, {gpu(1, 0, 1)}, 0, "");
  EXPECT_EQ(forced.device, Device::cuda(0));
  EXPECT_THAT(forced.note, HasSubstr("not CUDA runs"));
}

TEST(DeviceChoice, LongRankListsAreCut) {
  std::vector<dist::RankView> views;
  for (int r = 0; r < 16; ++r) views.push_back(gpu(8, r % 8, 100 + r));
  std::string note = dist::device_choose(dist::DeviceSetting::cuda, false, views, 0, "").note;
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
  EXPECT_EQ(io::load_config(path).device, dist::DeviceSetting::automatic);
  for (auto [value, setting] :
       {std::pair{"auto", dist::DeviceSetting::automatic}, std::pair{"cpu", dist::DeviceSetting::cpu},
        std::pair{"cuda", dist::DeviceSetting::cuda}}) {
    io::Config c = io::load_config(path, {std::string("device=") + value});
    EXPECT_EQ(c.device, setting);
    EXPECT_THAT(io::config_to_yaml(c), HasSubstr(std::string("device: ") + value));
  }
  EXPECT_THAT(error_of([&] { io::load_config(path, {"device=cuda:1"}); }),
              HasSubstr("key 'device': unknown device 'cuda:1' (expected one of: auto, cpu, cuda)"));
  EXPECT_THAT(error_of([&] { io::load_config(path, {"device=[cuda]"}); }), HasSubstr("device"));
}

// --- the train binary on this machine

using TrainDevice = dpt::testing::TrainRunner;
const std::string kSmall = "--set dataset.size=96";  // 3 steps an epoch: seconds on one core

TEST_F(TrainDevice, ExplicitCpuTrains) {
  dpt::testing::TrainResult r = train(config("cpu", "device: cpu\n"), kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("device: cpu\n"));
  EXPECT_EQ(metric("cpu", "train_loss").size(), 2u);
  EXPECT_THAT(dpt::io::read_file(dir_.file("cpu") + "/summary.json"), HasSubstr("\"device\": \"cpu\""));
}

TEST_F(TrainDevice, AutoSaysWhatItPicked) {
  dpt::testing::TrainResult r = train(config("auto"), kSmall + " --set epochs=1");
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
  dpt::testing::TrainResult r = train(config("cuda", "device: cuda\n"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "error: device: cuda, but no CUDA device: " + device_unavailable_reason(DeviceType::cuda) +
                       " (set device: cpu or auto)\n");
  EXPECT_FALSE(fs::exists(dir_.file("cuda") + "/metrics.jsonl"));
}

TEST_F(TrainDevice, BadDeviceValuesAreOneLineAndExitCode2) {
  for (const char* bad : {"gpu", "cuda:0", "[cuda]"}) {
    dpt::testing::TrainResult r = train(config("bad"), std::string("--set device=") + bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_THAT(r.err, HasSubstr("key 'device'")) << bad;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
