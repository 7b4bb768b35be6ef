// Every op with CUDA kernels against its CPU twin: the same inputs on the CPU and on
// cuda:0, outputs and input gradients compared within the f32 tolerance (cuda_compare.h),
// with every device allocation poisoned (NaN) first; plus the CUDA kernels' own edges (empty
// tensors, grid-stride loops past the grid, broadcasting, strided views, ties) and the
// errors for inputs on the wrong device. Skipped, with the reason, without a GPU.
//
// Adding an op touches its op file, its kernels and its tests, nothing else:
//   1. framework/ops/<family>.{h,cpp}: checks (op_device), then the forward and the backward
//      rule side by side, once for every device, calling kernels_for(device).<entry>;
//   2. framework/backend/kernel_list.h: a line per kernel entry the rule needs (its contract
//      in a line or two), defined by each device beside its twins: backend/cpu/<family>.cpp
//      (oneDNN or plain loops) and backend/cuda/<family>.cu;
//   3. tests: its finite-difference check on the CPU (test_ops_*.cpp), and here one
//      expect_cuda_matches_cpu per interesting shape (and test_cuda_gradcheck.cpp on CUDA).
#include <gtest/gtest.h>

#include "cuda_compare.h"

#ifndef DPT_WITH_CUDA

TEST(CudaOps, GpuTests) { GTEST_SKIP() << dpt::testing::kNoCudaBackend; }

#else

#include <cmath>
#include <cstring>

#include "backend/cuda/kernels.h"
#include "backend/cuda/layout.h"
#include "backend/cuda/math_settings.h"
#include "core/rng.h"
#include "error_of.h"
#include "inputs.h"
#include "ops/activation.h"
#include "ops/cast.h"
#include "ops/conv.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/shortcut_pad.h"
#include "ops/sync_batch_norm.h"

using namespace dpt;
using dpt::testing::away_from_zero;
using dpt::testing::distinct_tensor;
using dpt::testing::error_of;
using dpt::testing::expect_cuda_matches_cpu;
using dpt::testing::expect_tensors_close;
using dpt::testing::labels_of;
using dpt::testing::odd_32nds;
using dpt::testing::quarter_steps;
using dpt::testing::random_labels;
using dpt::testing::random_leaf;
using dpt::testing::random_tensor;
using dpt::testing::Tolerance;

namespace {

using CudaOps = dpt::testing::CudaTest;
using Inputs = std::vector<Tensor>;

}  // namespace

TEST_F(CudaOps, ElementwiseWithBroadcastingAndStridedViews) {
  using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);
  std::vector<std::pair<const char*, BinaryFn> > ops = {
      {"add", add}, {"sub", sub}, {"mul", mul}, {"div", div}};
  std::vector<std::pair<Shape, Shape> > shapes = {{{4, 5}, {4, 5}}, {{2, 3, 4}, {3, 1}}, {{2, 1, 4}, {3, 1}},
                                                  {{6, 7}, {1}},    {{1}, {6, 7}},       {{3, 4}, {}}};
  uint64_t seed = 1;
  for (const auto& [name, op] : ops)
    for (const auto& [sa, sb] : shapes) {
      SCOPED_TRACE(std::string(name) + " " + shape_str(sa) + " " + shape_str(sb));
      Tensor a = random_leaf(sa, ++seed), b = random_leaf(sb, ++seed, 0.5f, 2.0f);  // b away from 0 for div
      expect_cuda_matches_cpu(name, [op](const Inputs& t) { return op(t[0], t[1]); }, {a, b});
    }
  // A transposed view (strided, not contiguous) on either side.
  Tensor base = random_tensor({5, 4}, 50);
  Tensor b = random_leaf({4, 5}, 51, 0.5f, 2.0f);
  expect_cuda_matches_cpu("mul of a transposed view",
                          [](const Inputs& t) {
                            return mul(t[0].as_strided({4, 5}, {1, 4}, 0), t[1]);
                          },
                          {base, b});
  expect_cuda_matches_cpu("affine", [](const Inputs& t) { return affine(t[0], -1.5f, 0.25f); },
                          {random_leaf({3, 8}, 52)});
  // Empty tensors: no launch, no error.
  Tensor empty = Tensor::empty({0, 3}, DType::f32, Device::cuda(0));
  EXPECT_EQ(add(empty, empty).numel(), 0);
  EXPECT_EQ(relu(empty).numel(), 0);
}

TEST_F(CudaOps, ReluAndGridStrideLoopsPastTheGrid) {
  expect_cuda_matches_cpu("relu", [](const Inputs& t) { return relu(t[0]); },
                          {away_from_zero({7, 9}, 1).set_requires_grad(true)});
  // 4096 blocks of 256 threads cover 2^20 elements: this takes each thread round 4 times.
  Tensor big = away_from_zero({(1 << 22) + 5}, 2).set_requires_grad(true);
  expect_cuda_matches_cpu("relu, 2^22 + 5 elements", [](const Inputs& t) { return relu(t[0]); }, {big});
  expect_cuda_matches_cpu("sum, 2^22 + 5 elements", [](const Inputs& t) { return sum(t[0]); }, {big},
                          {1e-2, 1e-5});
}

// Host logic, no device needed: the elementwise kernels' layout check ignores the strides
// of size-1 dimensions, so a channels-last [N, C, 1, 1] tensor and its empty_like twin (given
// the contiguous strides, the same bytes) pass, while a real layout difference does not.
TEST(CudaLayout, SameDenseLayoutIgnoresStridesOfSizeOneDimensions) {
  Tensor nhwc_1x1 = Tensor::empty_channels_last({2, 6, 1, 1});
  ASSERT_NE(nhwc_1x1.strides(), Tensor::empty_like(nhwc_1x1).strides());
  EXPECT_TRUE(cuda::same_dense_layout(nhwc_1x1, Tensor::empty_like(nhwc_1x1)));
  EXPECT_TRUE(
      cuda::same_dense_layout(Tensor::empty_channels_last({2, 1, 3, 3}), Tensor::empty({2, 1, 3, 3})));
  EXPECT_FALSE(
      cuda::same_dense_layout(Tensor::empty_channels_last({2, 6, 3, 3}), Tensor::empty({2, 6, 3, 3})));
  EXPECT_FALSE(cuda::same_dense_layout(Tensor::empty({6, 2}), Tensor::empty({2, 6})));
  Tensor base = Tensor::empty({4, 5});
  EXPECT_FALSE(cuda::same_dense_layout(base.as_strided({4, 2}, {5, 1}, 0), Tensor::empty({4, 2})))
      << "a slice is not dense";
}

// The fused residual sum + ReLU against its CPU twin at sums of +-0, one float step from 0
// and NaN (which give 0, as relu's do), past one grid, and with mixed layouts (which take
// add + relu); on the device, against relu(add(a, b)); then its errors. bf16 and NHWC:
// test_cuda_mixed.cpp.
TEST_F(CudaOps, AddReluAtZeroNaNPastTheGridAndMixedLayouts) {
  auto fused = [](const Inputs& t) { return add_relu(t[0], t[1]); };
  auto [a, b] = dpt::testing::add_relu_inputs({2, 6, 5, 5}, 60, false);
  expect_cuda_matches_cpu("add_relu", fused, {a, b});
  auto [big_a, big_b] = dpt::testing::add_relu_inputs({(1 << 22) + 5}, 62, false);
  expect_cuda_matches_cpu("add_relu, 2^22 + 5 elements", fused, {big_a, big_b});
  expect_cuda_matches_cpu(
      "add_relu, NCHW + NHWC",
      [](const Inputs& t) { return add_relu(t[0], cast(t[1], DType::f32, MemoryFormat::channels_last)); },
      {a, b});
  // Channels-last [2, 6, 1, 1] views: also contiguous, so the output gets other strides on
  // the size-1 dimensions (forward only: views are not recorded).
  auto one_by_one = [](const Tensor& t) { return t.as_strided({2, 6, 1, 1}, {6, 1, 6, 6}, t.offset()); };
  Tensor small_a = random_tensor({12}, 64), small_b = random_tensor({12}, 65);
  expect_cuda_matches_cpu("add_relu and relu of channels-last [2, 6, 1, 1]",
                          [&](const Inputs& t) {
                            return add(add_relu(one_by_one(t[0]), one_by_one(t[1])), relu(one_by_one(t[0])));
                          },
                          {small_a, small_b});
  Tensor ga = a.detach().to(gpu), gb = b.detach().to(gpu);
  Tensor out = add_relu(ga, gb);
  EXPECT_FALSE(out.grad_fn()) << "no input requires grad: nothing recorded";
  EXPECT_EQ(out.to_vector(), relu(add(ga, gb)).to_vector());
  Tensor empty = Tensor::empty({0, 3}, DType::f32, gpu);
  EXPECT_EQ(add_relu(empty, empty).numel(), 0);

  EXPECT_EQ(error_of([&] { add_relu(ga, b); }),
            "add_relu: inputs on different devices (cuda:0 and cpu); move them to one device first");
  EXPECT_EQ(
      error_of([&] {
        add_relu(ga, Tensor::empty({2, 6, 5, 4}, DType::f32, gpu));
      }),
      "add_relu: expected inputs of one shape (it does not broadcast), got [2, 6, 5, 5] and [2, 6, 5, 4]");
  EXPECT_EQ(error_of([&] { cuda::add_relu_forward(ga, gb, Tensor::empty(ga.shape(), DType::bf16, gpu)); }),
            "add_relu on cuda: needs dense tensors of one shape, layout and dtype, got [2, 6, 5, 5] f32 and "
            "[2, 6, 5, 5] bf16");
  Tensor leaf = ga.detach().set_requires_grad(true);
  Tensor y = add_relu(leaf, gb);
  EXPECT_EQ(error_of([&] { y.backward(Tensor::zeros(ga.shape())); }),
            "add_relu backward: expected an f32 gradient on cuda:0, got f32 on cpu");
}

TEST_F(CudaOps, SumMeanAndShapes) {
  Tensor x = random_leaf({3, 7, 5}, 3);
  expect_cuda_matches_cpu("sum", [](const Inputs& t) { return sum(t[0]); }, {x});
  expect_cuda_matches_cpu("mean", [](const Inputs& t) { return mean(t[0]); }, {x});
  expect_cuda_matches_cpu("flatten then scale", [](const Inputs& t) { return mul(flatten(t[0]), 2.0f); },
                          {x});
  expect_cuda_matches_cpu("reshape", [](const Inputs& t) { return relu(reshape(t[0], {-1, 5})); }, {x});
  Tensor one = mean(Tensor::zeros({4}, DType::f32, Device::cuda(0)));
  EXPECT_TRUE(one.device() == Device::cuda(0));
  EXPECT_EQ(one.item(), 0.0f);
}

TEST_F(CudaOps, LossesWithAndWithoutSmoothing) {
  for (int64_t cols : {10, 33, 1000}) {
    SCOPED_TRACE("classes " + std::to_string(cols));
    Tensor logits = random_leaf({37, cols}, 4, -4.0f, 4.0f);
    Tensor labels = random_labels(37, cols, 5);
    for (float s : {0.0f, 0.1f})
      expect_cuda_matches_cpu("cross_entropy", [s](const Inputs& t) { return cross_entropy(t[0], t[1], s); },
                              {logits, labels});
    expect_cuda_matches_cpu("log_softmax", [](const Inputs& t) { return log_softmax(t[0]); }, {logits});
    expect_cuda_matches_cpu("nll_loss of log_softmax",
                            [](const Inputs& t) { return nll_loss(log_softmax(t[0]), t[1]); },
                            {logits, labels});
  }
}

// The CUDA twin of Loss.StridedLabelsReadLikeTheirContiguousCopy: a strided label view
// (the values between are out of range) against the CPU on contiguous labels.
TEST_F(CudaOps, StridedLabelsReadThroughTheirStrides) {
  const Device gpu = Device::cuda(0);
  Tensor logits = random_tensor({4, 5}, 6, -3.0f, 3.0f);
  Tensor strided = labels_of({0, 99, 4, 99, 2, 99, 3, 99}).to(gpu).as_strided({4}, {2}, 0);
  Tensor contiguous = labels_of({0, 4, 2, 3});
  for (float s : {0.0f, 0.1f})
    EXPECT_NEAR(cross_entropy(logits.to(gpu), strided, s).item(), cross_entropy(logits, contiguous, s).item(),
                1e-5);
  EXPECT_NEAR(nll_loss(log_softmax(logits.to(gpu)), strided).item(),
              nll_loss(log_softmax(logits), contiguous).item(), 1e-5);
  EXPECT_EQ(count_correct(logits.to(gpu), strided), count_correct(logits, contiguous));
  Tensor bad = labels_of({1, 1, 7, 1, 2, 1, 3, 1}).to(gpu).as_strided({4}, {2}, 0);
  EXPECT_EQ(error_of([&] { cross_entropy(logits.to(gpu), bad); }),
            "cross_entropy: label 7 at row 1 is outside [0, 5)");
}

TEST_F(CudaOps, CountCorrectTakesTheFirstMaximum) {
  // Rows with ties: the first maximum is the prediction, as std::max_element picks.
  Tensor logits = Tensor::from_vector(std::vector<float>{0, 5, 5, 1, 1, 1, 2, 9, -1, 3, 3, 0}, {4, 3});
  Tensor labels = labels_of({1, 0, 1, 0});
  EXPECT_EQ(count_correct(logits.to(Device::cuda(0)), labels.to(Device::cuda(0))),
            count_correct(logits, labels));
  EXPECT_EQ(count_correct(logits, labels), 4);
  // NaN logits as std::max_element treats them: a NaN in column 0 is the prediction, any
  // other NaN never is (and must not hide the other columns a warp lane reads with it).
  const float nan = std::nanf("");
  std::vector<float> v(4 * 40, 0.0f);
  v[0 * 40 + 0] = nan;                                               // prediction 0
  v[1 * 40 + 1] = nan, v[1 * 40 + 33] = 5.0f;                        // 33, in the NaN's lane
  v[2 * 40 + 0] = 1.0f, v[2 * 40 + 5] = nan, v[2 * 40 + 7] = 0.5f;   // 0
  v[3 * 40 + 2] = 3.0f, v[3 * 40 + 3] = nan, v[3 * 40 + 35] = 3.0f;  // 2, the first of a tie
  Tensor nan_logits = Tensor::from_vector(v, {4, 40});
  Tensor nan_labels = labels_of({0, 33, 0, 2});
  EXPECT_EQ(count_correct(nan_logits, nan_labels), 4);
  EXPECT_EQ(count_correct(nan_logits.to(Device::cuda(0)), nan_labels.to(Device::cuda(0))), 4);
  Tensor many = random_tensor({1000, 10}, 6);
  Tensor many_labels = random_labels(1000, 10, 7);
  EXPECT_EQ(count_correct(many.to(Device::cuda(0)), many_labels.to(Device::cuda(0))),
            count_correct(many, many_labels));
}

TEST_F(CudaOps, BadLabelsAndDevicesAreClearErrors) {
  Tensor logits = random_tensor({2, 3}, 8).to(Device::cuda(0));
  EXPECT_EQ(error_of([&] {
              cross_entropy(logits, labels_of({0, 3}).to(Device::cuda(0)));
            }),
            "cross_entropy: label 3 at row 1 is outside [0, 3)");
  EXPECT_EQ(error_of([&] {
              count_correct(logits, labels_of({-1, 0}).to(Device::cuda(0)));
            }),
            "count_correct: label -1 at row 0 is outside [0, 3)");
  EXPECT_EQ(error_of([&] {
              cross_entropy(logits, labels_of({0, 1}));
            }),
            "cross_entropy: labels are on cpu but logits on cuda:0");
  EXPECT_EQ(error_of([&] {
              add(logits, random_tensor({2, 3}, 9));
            }),
            "elementwise: inputs on different devices (cuda:0 and cpu); move them to one device first");
  Tensor x = random_tensor({2, 3, 4, 4}, 10).to(Device::cuda(0));
  Tensor c_cpu = Tensor::full({3}, 1.0f);
  EXPECT_EQ(
      error_of([&] { sync_batch_norm2d(x, c_cpu, c_cpu, Tensor(), Tensor(), {}, [](const Tensor&) {}); }),
      "sync_batch_norm2d: inputs on different devices (cuda:0 and cpu); move them to one device first");
  // A gradient from the wrong device is turned away before any kernel reads it.
  Tensor leaf = random_tensor({2, 3}, 11).to(Device::cuda(0)).set_requires_grad(true);
  Tensor y = relu(leaf);
  EXPECT_EQ(error_of([&] {
              y.backward(Tensor::zeros({2, 3}));
            }),
            "relu backward: expected an f32 gradient on cuda:0, got f32 on cpu");
}

TEST_F(CudaOps, LinearAndMatmul) {
  Tensor x = random_leaf({9, 20}, 12), w = random_leaf({7, 20}, 13), b = random_leaf({7}, 14);
  expect_cuda_matches_cpu("linear", [](const Inputs& t) { return linear(t[0], t[1], t[2]); }, {x, w, b});
  expect_cuda_matches_cpu("linear, no bias", [](const Inputs& t) { return linear(t[0], t[1], Tensor()); },
                          {x, w});
  // Fused ReLU: positive inputs and weights of both signs keep pre-activations off 0.
  Tensor xp = random_leaf({9, 20}, 15, 0.5f, 1.0f);
  Tensor wp = Tensor::from_vector(
                  [] {
                    std::vector<float> v = random_tensor({4, 20}, 16, 0.5f, 1.0f).to_vector();
                    std::vector<float> n = random_tensor({3, 20}, 17, -1.0f, -0.5f).to_vector();
                    v.insert(v.end(), n.begin(), n.end());
                    return v;
                  }(),
                  {7, 20})
                  .set_requires_grad(true);
  expect_cuda_matches_cpu("linear + relu", [](const Inputs& t) { return linear(t[0], t[1], t[2], true); },
                          {xp, wp, b});
  expect_cuda_matches_cpu("matmul", [](const Inputs& t) { return matmul(t[0], t[1]); },
                          {random_leaf({5, 11}, 18), random_leaf({11, 6}, 19)});
  expect_cuda_matches_cpu("matmul, large", [](const Inputs& t) { return matmul(t[0], t[1]); },
                          {random_leaf({300, 257}, 20), random_leaf({257, 129}, 21)});
}

TEST_F(CudaOps, Tf32IsASettingOffByDefault) {
  ASSERT_FALSE(cuda::tf32_enabled()) << "run without DPT_CUDA_TF32=1: the other tests expect f32 products";
  Tensor a = random_leaf({128, 512}, 22), b = random_leaf({512, 64}, 23);
  Tensor x = random_leaf({4, 32, 16, 16}, 24), w = random_leaf({32, 32, 3, 3}, 25);
  // TF32 rounds the inputs to 10 mantissa bits: products over 512 (matmul) and 288
  // (conv) terms land within a few 1e-3 of f32, farther than f32 rounding ever would.
  cuda::set_tf32_enabled(true);
  const dpt::testing::Tolerance tf32{2e-2, 1e-2};
  expect_cuda_matches_cpu(
      "matmul with TF32", [](const Inputs& t) { return matmul(t[0], t[1]); }, {a, b}, tf32);
  expect_cuda_matches_cpu(
      "conv2d with TF32", [](const Inputs& t) { return conv2d(t[0], t[1], Tensor(), {.padding = 1}); },
      {x, w}, tf32);
  cuda::set_tf32_enabled(false);
  expect_cuda_matches_cpu("matmul, TF32 off again", [](const Inputs& t) { return matmul(t[0], t[1]); },
                          {a, b});
}

// With deterministic convolutions on, a conv's backward gives the same bits every run (the
// shape is one where cuDNN's fastest backward-filter algorithms sum with atomics), and the
// results still match the CPU; the setting is off by default.
TEST_F(CudaOps, DeterministicConvolutionsRepeatToTheBit) {
  ASSERT_FALSE(cuda::cudnn_deterministic()) << "run without DPT_CUDNN_DETERMINISTIC=1";
  cuda::set_cudnn_deterministic(true);
  const Device gpu = Device::cuda(0);
  Tensor x = random_leaf({64, 64, 16, 16}, 26).to(gpu), w = random_leaf({64, 64, 3, 3}, 27).to(gpu);
  std::vector<std::vector<float> > runs;
  for (int run = 0; run < 3; ++run) {
    Tensor xr = x.detach().set_requires_grad(true), wr = w.detach().set_requires_grad(true);
    Tensor y = conv2d(xr, wr, Tensor(), {.padding = 1});
    sum(mul(y, y)).backward();
    std::vector<float> values = wr.grad().to_vector(), grad_x = xr.grad().to_vector();
    values.insert(values.end(), grad_x.begin(), grad_x.end());
    runs.push_back(std::move(values));
  }
  for (int run = 1; run < 3; ++run)
    EXPECT_EQ(0, std::memcmp(runs[run].data(), runs[0].data(), runs[0].size() * sizeof(float)))
        << "run " << run << " differs from run 0";
  // The deterministic backward-filter algorithms cuDNN offers sum each weight's 1024
  // products (size ~10) in their own order: on an H200 2 of 9216 elements that cancel
  // to ~0.7 came out 1.7e-4 away from the CPU's, ~2e-5 of the sum's size. atol 1e-3 keeps
  // 6x that and stays far below a wrong gradient.
  expect_cuda_matches_cpu(
      "conv2d, deterministic algorithms",
      [](const Inputs& t) { return conv2d(t[0], t[1], Tensor(), {.padding = 1}); },
      {random_leaf({4, 32, 16, 16}, 28), random_leaf({32, 32, 3, 3}, 29)}, Tolerance{1e-3, 1e-4});
  cuda::set_cudnn_deterministic(false);
}

TEST_F(CudaOps, Conv2dShapesAndOptions) {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
    bool bias, relu;
  };
  std::vector<Case> cases = {
      {{2, 3, 8, 8}, {5, 3, 3, 3}, {.padding = 1}, true, false},
      {{2, 4, 9, 7}, {6, 4, 3, 3}, {.stride = 2, .padding = 1}, false, false},
      {{1, 4, 6, 6}, {6, 2, 3, 3}, {.padding = 1, .groups = 2}, true, false},
      {{2, 3, 10, 10}, {4, 3, 3, 3}, {.padding = 2, .dilation = 2}, true, false},
      {{3, 16, 8, 8}, {32, 16, 1, 1}, {.stride = 2}, false, false},
      {{2, 8, 7, 7}, {8, 1, 3, 3}, {.padding = 1, .groups = 8}, true, false},  // depthwise
      {{4, 1, 28, 28}, {32, 1, 3, 3}, {.padding = 1}, true, true},             // mnist_cnn's first layer
  };
  uint64_t seed = 30;
  for (const Case& k : cases) {
    SCOPED_TRACE(shape_str(k.x) + " * " + shape_str(k.w) + (k.relu ? " relu" : ""));
    // With the fused ReLU, uniform inputs put pre-activations within 2.9e-7 of 0 (seeds 47-49),
    // where another f32 summation order flips the mask and moves gradients by |upstream * w|:
    // quarter_steps / odd_32nds keep them 1/32 away, and exact.
    Tensor x = k.relu ? quarter_steps(k.x, ++seed) : random_leaf(k.x, ++seed);
    Tensor w = k.relu ? quarter_steps(k.w, ++seed) : random_leaf(k.w, ++seed);
    Tensor b = !k.bias ? Tensor() : k.relu ? odd_32nds({k.w[0]}, ++seed) : random_leaf({k.w[0]}, ++seed);
    Conv2dOptions o = k.o;
    bool relu_fused = k.relu;
    Inputs in = k.bias ? Inputs{x, w, b} : Inputs{x, w};
    expect_cuda_matches_cpu(
        "conv2d",
        [o, relu_fused](const Inputs& t) {
          return conv2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), o, relu_fused);
        },
        in);
  }
  // The first layer of a network: no gradient for x, so no backward-data pass.
  Tensor x = random_tensor({2, 3, 6, 6}, 40).to(Device::cuda(0));
  Tensor w = random_tensor({4, 3, 3, 3}, 41).to(Device::cuda(0)).set_requires_grad(true);
  sum(conv2d(x, w, Tensor(), {.padding = 1})).backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
}

TEST_F(CudaOps, BatchNormTrainingEvalAndRunningStats) {
  for (bool relu_fused : {false, true}) {
    SCOPED_TRACE(relu_fused ? "fused relu" : "no relu");
    Tensor x = random_leaf({4, 6, 5, 5}, 50, -1.0f, 2.0f);
    Tensor w = random_leaf({6}, 51, 0.5f, 1.5f), b = random_leaf({6}, 52);
    // Training: outputs, gradients, and the running statistics each side leaves.
    Tensor rm_cpu = random_tensor({6}, 53), rv_cpu = random_tensor({6}, 54, 0.5f, 1.5f);
    Tensor rm_gpu = rm_cpu.to(Device::cuda(0)), rv_gpu = rv_cpu.to(Device::cuda(0));
    expect_cuda_matches_cpu("batch_norm2d, training",
                            [&](const Inputs& t) {
                              bool on_gpu = t[0].device().is_cuda();
                              return batch_norm2d(t[0], t[1], t[2], on_gpu ? rm_gpu : rm_cpu,
                                                  on_gpu ? rv_gpu : rv_cpu, true, {.momentum = 0.2f},
                                                  relu_fused);
                            },
                            {x, w, b});
    expect_tensors_close(rm_gpu, rm_cpu, "running_mean");
    expect_tensors_close(rv_gpu, rv_cpu, "running_var (unbiased batch variance)");
    // Eval: the running statistics normalise, and stay as they are.
    expect_cuda_matches_cpu("batch_norm2d, eval",
                            [&](const Inputs& t) {
                              bool on_gpu = t[0].device().is_cuda();
                              return batch_norm2d(t[0], t[1], t[2], on_gpu ? rm_gpu : rm_cpu,
                                                  on_gpu ? rv_gpu : rv_cpu, false, {}, relu_fused);
                            },
                            {x, w, b});
    expect_tensors_close(rm_gpu, rm_cpu, "running_mean after eval");
  }
  // Training without running statistics.
  expect_cuda_matches_cpu(
      "batch_norm2d, untracked",
      [](const Inputs& t) { return batch_norm2d(t[0], t[1], t[2], Tensor(), Tensor(), true); },
      {random_leaf({2, 3, 4, 4}, 55), random_leaf({3}, 56), random_leaf({3}, 57)});
}

TEST_F(CudaOps, PoolingMaxAvgGlobal) {
  struct Case {
    Shape x;
    int64_t kernel, stride, padding;
  };
  for (const Case& k :
       std::vector<Case>{{{2, 3, 8, 8}, 2, 2, 0}, {{2, 3, 7, 9}, 3, 2, 1}, {{1, 4, 5, 5}, 3, 1, 1}}) {
    SCOPED_TRACE(shape_str(k.x) + " k" + std::to_string(k.kernel) + " s" + std::to_string(k.stride) + " p" +
                 std::to_string(k.padding));
    Tensor x = distinct_tensor(k.x, 60, 0.01f).set_requires_grad(true);
    expect_cuda_matches_cpu(
        "max_pool2d", [k](const Inputs& t) { return max_pool2d(t[0], k.kernel, k.stride, k.padding); }, {x});
    expect_cuda_matches_cpu(
        "avg_pool2d", [k](const Inputs& t) { return avg_pool2d(t[0], k.kernel, k.stride, k.padding); }, {x});
  }
  expect_cuda_matches_cpu("global_avg_pool2d", [](const Inputs& t) { return global_avg_pool2d(t[0]); },
                          {random_leaf({3, 5, 8, 8}, 61)});
}

TEST_F(CudaOps, ShortcutPad) {
  expect_cuda_matches_cpu("shortcut_pad, stride 2", [](const Inputs& t) { return shortcut_pad(t[0], 32, 2); },
                          {random_leaf({2, 16, 8, 8}, 70)});
  expect_cuda_matches_cpu("shortcut_pad, odd size", [](const Inputs& t) { return shortcut_pad(t[0], 5, 2); },
                          {random_leaf({1, 3, 7, 5}, 71)});
}

TEST_F(CudaOps, DropoutMasksScaleAndReproduce) {
  Tensor x = Tensor::full({100000}, 1.0f).to(Device::cuda(0)).set_requires_grad(true);
  Rng rng(7);
  Tensor y = dropout(x, 0.25f, true, rng);
  std::vector<float> v = y.to_vector();
  int64_t zeros = 0;
  for (float e : v) {
    ASSERT_TRUE(e == 0.0f || std::abs(e - 1.0f / 0.75f) < 1e-6) << e;
    zeros += e == 0.0f;
  }
  EXPECT_NEAR(static_cast<double>(zeros) / v.size(), 0.25, 0.01);
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector(), v);  // d(sum)/dx = mask, equal to y for x = 1
  // The same seed gives the same mask; the generator moved on, so the next call differs.
  Rng again(7);
  EXPECT_EQ(dropout(x, 0.25f, true, again).to_vector(), v);
  EXPECT_NE(dropout(x, 0.25f, true, again).to_vector(), v);
  EXPECT_TRUE(dropout(x, 0.25f, false, rng).is_same(x));
}

#endif  // DPT_WITH_CUDA
