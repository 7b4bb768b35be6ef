// train with device: cuda end to end (skipped without a GPU): a 2-epoch run on
// synthetic data follows the same run on the CPU (losses per epoch, accuracy, final
// weights saved from the device), a CUDA run stopped by SIGTERM mid-epoch and resumed on
// the device ends where an uninterrupted one does, and a run in bf16 channels-last with
// CUDA graphs ends where the same run without graphs does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "train_runner.h"

using namespace dpt;
using dpt::testing::TrainResult;
using ::testing::HasSubstr;

namespace {

using CudaTrainRun = dpt::testing::TrainRunner;

void expect_curves_close(const std::vector<double>& gpu, const std::vector<double>& cpu, double rtol,
                         const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(gpu[i], cpu[i], rtol * std::abs(cpu[i]) + 1e-4) << what << " at epoch " << i + 1;
}

TEST_F(CudaTrainRun, FollowsTheCpuRunsLossCurve) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << device_unavailable_reason(DeviceType::cuda);
  TrainResult cpu = train(config("cpu", "device: cpu\n"));
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  TrainResult gpu = train(config("gpu", "device: cuda\n"));
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  EXPECT_THAT(gpu.out, HasSubstr("device: cuda: rank 0 -> cuda:0"));
  EXPECT_THAT(dpt::io::read_file(dir_.file("gpu") + "/summary.json"), HasSubstr("\"device\": \"cuda:0\""));
  // 24 SGD steps through batch norm, where only f32 summation orders differ (cuDNN,
  // oneDNN). Not within f32 noise: one ReLU input that another order puts on the other
  // side of 0 moves a whole channel through batch norm, and 24 steps on this noise-like
  // data carry that on. The bounds are what another summation order does to dpt's own CPU
  // run: tools/research/train_run_threads.py (threads 1 against 2, seeds 0-8) moves the
  // train loss by up to 1.7e-3 (relative), the test loss by 4.8e-3, a parameter by 0.057,
  // a batch-norm running statistic by 0.22 and the accuracy by 3 of 64 images. The bounds
  // are 1.7-1.8x those (an H200 run: running statistics 0.21 away, accuracy 3 of 64);
  // kaiming weights of a 3x3x16 conv are ~0.1, and the op tests check each kernel alone.
  expect_curves_close(metric("gpu", "train_loss"), metric("cpu", "train_loss"), 3e-3, "train_loss");
  expect_curves_close(metric("gpu", "test_loss"), metric("cpu", "test_loss"), 8e-3, "test_loss");
  std::vector<double> acc_gpu = metric("gpu", "test_acc"), acc_cpu = metric("cpu", "test_acc");
  ASSERT_EQ(acc_gpu.size(), 2u);
  EXPECT_NEAR(acc_gpu[1], acc_cpu[1], 5.0 / 64);
  // The final weights, saved from the device.
  expect_weights_close("gpu", "cpu", 1e-2, 0.1, 0.4);
}

TEST_F(CudaTrainRun, StoppedAndResumedEndsWhereAnUninterruptedRunDoes) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << device_unavailable_reason(DeviceType::cuda);
  TrainResult whole = train(config("whole", "device: cuda\n"));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  // The same run stopped by SIGTERM as step 16 begins (epoch 2 of 12-step epochs, so a
  // mid-epoch checkpoint: momentum, EMA, position), then resumed on the GPU.
  TrainResult cut = train(config("cut", "device: cuda\n"), "", "sigterm@16");
  EXPECT_EQ(cut.exit_code, 143) << cut.err;
  TrainResult resumed = train(config("cut", "device: cuda\n"), "--resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("resumed from"));
  // Not bit for bit: cuDNN may pick algorithms whose sums are ordered by the hardware, and
  // then the two runs drift apart as a CPU and a GPU run do (tools/research/train_run_drift.py: even
  // noise of 1e-8 per op crosses a ReLU kink in 2 of 3 seeds, weights then move by up to
  // 2.3e-2, train_loss by up to 1.6e-4). A resume that lost momentum at step 16 moves
  // train_loss by 1.4e-3 to 3.4e-3 (--drop-momentum 16): the loss curve keeps 1e-3.
  expect_curves_close(metric("cut", "train_loss"), metric("whole", "train_loss"), 1e-3, "train_loss");
  expect_weights_close("cut", "whole", 1e-2, 6e-2);
}

// The GPU-only keys together — precision: bf16, channels_last: true, cuda_graphs: true —
// with EMA, augmentation and 3-step epochs, as long as the graph's warm-up, so that an
// evaluation (eager, bf16 logits) falls between the warm-up and the capture: the run ends
// where the same run without graphs does.
TEST_F(CudaTrainRun, Bf16ChannelsLastGraphedRunFollowsTheEagerOne) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << device_unavailable_reason(DeviceType::cuda);
  const std::string keys = "device: cuda\nprecision: bf16\nchannels_last: true\nmax_steps_per_epoch: 3\n";
  TrainResult eager = train(config("eager", keys));
  ASSERT_EQ(eager.exit_code, 0) << eager.err;
  TrainResult graphed = train(config("graphed", keys + "cuda_graphs: true\n"));
  ASSERT_EQ(graphed.exit_code, 0) << graphed.err;
  // The same bf16 kernels on both sides; only cuDNN's summation orders may differ, and one
  // f32 difference that changes a bf16 rounding drifts on: tools/research/train_run_drift.py --bf16
  // --steps 3 --noise 1e-7 (8 seeds) moves losses by up to 8.8e-4 and weights by up to
  // 3.5e-3 (1e-2 |w| + 1e-3 fails 7 of 8 seeds, by up to 2.8x); atol 1e-2 is 2.9x that.
  expect_curves_close(metric("graphed", "train_loss"), metric("eager", "train_loss"), 1e-2, "train_loss");
  expect_curves_close(metric("graphed", "test_loss"), metric("eager", "test_loss"), 1e-2, "test_loss");
  expect_weights_close("graphed", "eager", 1e-2, 1e-2);
}

}  // namespace
