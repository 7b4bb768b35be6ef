// sync_batch_norm2d on cuda:0 against the CPU path: output, the gradients of x, weight
// and bias, and the running statistics, with the cross-rank sum as one rank sees it alone
// and as two ranks with the same data would (every sum doubled, so the count and the
// unbiased variance differ from one rank's); the sum receives device tensors. Sizes with
// one block per channel and with many (a channel of 2^18 values). Skipped without a GPU.
#include <gtest/gtest.h>

#include "cuda_compare.h"

#ifndef DPT_WITH_CUDA

TEST(CudaSyncBatchNorm, GpuTests) { GTEST_SKIP() << dpt::testing::kNoCudaBackend; }

#else

#include "ops/elementwise.h"
#include "ops/sync_batch_norm.h"

using namespace dpt;
using dpt::testing::expect_tensors_close;
using dpt::testing::random_tensor;

namespace {

using CudaSyncBatchNorm = dpt::testing::CudaTest;

struct Run {
  Tensor out, gx, gw, gb, running_mean, running_var;
  int sums = 0;                // calls of the cross-rank sum
  bool sums_on_device = true;  // every call got a tensor on the op's device
};

// The op on `device` from the same CPU inputs, backward from `upstream`; `ranks` identical
// ranks are simulated by multiplying every cross-rank sum by that many.
Run run_on(Device device, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& upstream,
           int ranks) {
  Run r;
  Tensor xd = x.to(device).set_requires_grad(true), wd = w.to(device).set_requires_grad(true),
         bd = b.to(device).set_requires_grad(true);
  r.running_mean = Tensor::zeros({x.size(1)}).to(device);
  r.running_var = random_tensor({x.size(1)}, 5, 0.5f, 1.5f).to(device);
  SumAcrossRanks sum = [&r, device, ranks](const Tensor& t) {
    ++r.sums;
    r.sums_on_device = r.sums_on_device && t.device() == device;
    t.copy_from(mul(t, static_cast<float>(ranks)));
  };
  r.out = sync_batch_norm2d(xd, wd, bd, r.running_mean, r.running_var, {0.1f, 1e-5f}, sum);
  r.out.backward(upstream.to(device));
  r.gx = xd.grad();
  r.gw = wd.grad();
  r.gb = bd.grad();
  return r;
}

void expect_matches_cpu(const Shape& shape, int ranks, uint64_t seed) {
  const std::string what = shape_str(shape) + " x " + std::to_string(ranks) + " rank(s)";
  Tensor x = random_tensor(shape, seed, -2.0f, 3.0f);
  Tensor w = random_tensor({shape[1]}, seed + 1, 0.5f, 1.5f), b = random_tensor({shape[1]}, seed + 2);
  Tensor upstream = random_tensor(shape, seed + 3);
  Run cpu = run_on(Device::cpu(), x, w, b, upstream, ranks);
  Run gpu = run_on(Device::cuda(0), x, w, b, upstream, ranks);
  EXPECT_EQ(gpu.sums, 3) << what << ": two sums forward, one backward";
  EXPECT_TRUE(gpu.sums_on_device) << what;
  ASSERT_TRUE(gpu.out.device() == Device::cuda(0) && gpu.gx.device() == Device::cuda(0));
  expect_tensors_close(gpu.out, cpu.out, what + " output");
  expect_tensors_close(gpu.gx, cpu.gx, what + " grad x");
  // Sums over up to 2^18 values: their f32 rounding is relative to the sum's size.
  expect_tensors_close(gpu.gw, cpu.gw, what + " grad weight", {1e-3, 1e-4});
  expect_tensors_close(gpu.gb, cpu.gb, what + " grad bias", {1e-3, 1e-4});
  expect_tensors_close(gpu.running_mean, cpu.running_mean, what + " running mean");
  expect_tensors_close(gpu.running_var, cpu.running_var, what + " running var");
}

TEST_F(CudaSyncBatchNorm, OneRankMatchesCpu) {
  expect_matches_cpu({5, 3, 4, 6}, 1, 10);
  expect_matches_cpu({2, 1, 1, 2}, 1, 20);      // two values per channel
  expect_matches_cpu({16, 24, 8, 8}, 1, 30);    // several blocks per channel
  expect_matches_cpu({8, 2, 128, 128}, 1, 40);  // 2^18 values per channel, thousands of blocks
}

TEST_F(CudaSyncBatchNorm, TwoIdenticalRanksMatchCpu) {
  expect_matches_cpu({5, 3, 4, 6}, 2, 50);
  expect_matches_cpu({1, 4, 1, 1}, 2, 60);  // one value per channel here, two over the ranks
}

TEST_F(CudaSyncBatchNorm, TooFewValuesOverAllRanksIsAnError) {
  Tensor x = random_tensor({1, 3, 1, 1}, 1).to(gpu), w = Tensor::full({3}, 1.0f).to(gpu),
         b = Tensor::zeros({3}).to(gpu);
  try {
    sync_batch_norm2d(x, w, b, Tensor(), Tensor(), {}, [](const Tensor&) {});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "sync_batch_norm2d: needs more than one value per channel over all ranks");
  }
}

TEST_F(CudaSyncBatchNorm, MixedDevicesAreAnError) {
  Tensor x = random_tensor({2, 3, 2, 2}, 1).to(gpu), w = Tensor::full({3}, 1.0f), b = Tensor::zeros({3});
  try {
    sync_batch_norm2d(x, w, b, Tensor(), Tensor(), {}, [](const Tensor&) {});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inputs on different devices"), std::string::npos) << e.what();
  }
}

}  // namespace

#endif  // DPT_WITH_CUDA
