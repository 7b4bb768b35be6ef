// The finite-difference gradient checks of the op tests (gradcheck.h), run with every
// evaluation on cuda:0: the CUDA backward kernels against the CUDA forward kernels, the
// same inputs (away from kinks) and tolerances as the CPU checks. Skipped without a GPU.
#include <gtest/gtest.h>

#include "cuda_compare.h"

#ifndef DPT_WITH_CUDA

TEST(CudaGradCheck, GpuTests) { GTEST_SKIP() << dpt::testing::kNoCudaBackend; }

#else

#include "inputs.h"
#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/shortcut_pad.h"

using namespace dpt;
using dpt::testing::away_from_zero;
using dpt::testing::distinct_tensor;
using dpt::testing::GradCheckOptions;
using dpt::testing::kink_free_input;
using dpt::testing::random_leaf;
using dpt::testing::random_tensor;

namespace {

using CudaGradCheck = dpt::testing::CudaTest;
using Inputs = std::vector<Tensor>;

const GradCheckOptions kOnGpu{.device = Device::cuda(0)};

void check(const dpt::testing::OpFn& f, std::vector<Tensor> inputs, GradCheckOptions opt = kOnGpu) {
  dpt::testing::expect_gradients_match(f, std::move(inputs), opt);
}

}  // namespace

TEST_F(CudaGradCheck, ReluReductionsShapes) {
  check([](const Inputs& v) { return relu(v[0]); }, {away_from_zero({4, 5}, 1).set_requires_grad(true)});
  Tensor x = random_leaf({3, 7}, 2);
  check([](const Inputs& v) { return mean(v[0]); }, {x});
  check([](const Inputs& v) { return sum(v[0]); }, {x});
  check([](const Inputs& v) { return mul(flatten(v[0]), 2.0f); }, {random_leaf({2, 3, 4}, 3)});
}

TEST_F(CudaGradCheck, AddRelu) {
  auto [a, b] = dpt::testing::add_relu_away_from_zero({2, 3, 4, 5}, 7);
  check([](const Inputs& v) { return add_relu(v[0], v[1]); }, {a, b});
}

TEST_F(CudaGradCheck, ElementwiseWithBroadcasting) {
  Tensor a = random_leaf({2, 3, 4}, 4), b = random_leaf({3, 1}, 5), c = random_leaf({3, 1}, 6, 0.5f, 2.0f);
  check([](const Inputs& x) { return add(x[0], x[1]); }, {a, b});
  check([](const Inputs& x) { return sub(x[0], x[1]); }, {a, b});
  check([](const Inputs& x) { return mul(x[0], x[1]); }, {a, b});
  check([](const Inputs& x) { return div(x[0], x[1]); }, {a, c});
  check([](const Inputs& x) { return affine(x[0], -1.5f, 0.3f); }, {a});
}

TEST_F(CudaGradCheck, Losses) {
  Tensor x = random_leaf({4, 5}, 7, -3.0f, 3.0f);
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 4, 2, 2}, {4}).to(Device::cuda(0));
  check([&](const Inputs& v) { return cross_entropy(v[0], labels, 0.1f); }, {x});
  check([&](const Inputs& v) { return nll_loss(log_softmax(v[0]), labels); }, {x});
  check([](const Inputs& v) { return log_softmax(v[0]); }, {x});
}

TEST_F(CudaGradCheck, LinearAndMatmul) {
  Tensor x = random_leaf({3, 4}, 8), w = random_leaf({5, 4}, 9), b = random_leaf({5}, 10);
  check([](const Inputs& t) { return linear(t[0], t[1], t[2]); }, {x, w, b});
  check([](const Inputs& t) { return linear(t[0], t[1], Tensor()); }, {x, w});
  check([](const Inputs& t) { return matmul(t[0], t[1]); }, {x, random_leaf({4, 6}, 11)});
  // Fused ReLU away from the kink: positive inputs, weights of one sign per output.
  Tensor xp = random_leaf({3, 4}, 12, 0.5f, 1.0f);
  std::vector<float> wv = random_tensor({2, 4}, 13, 0.5f, 1.0f).to_vector();
  std::vector<float> neg = random_tensor({2, 4}, 14, -1.0f, -0.5f).to_vector();
  wv.insert(wv.end(), neg.begin(), neg.end());
  Tensor wp = Tensor::from_vector(wv, {4, 4}).set_requires_grad(true);
  check([](const Inputs& t) { return linear(t[0], t[1], t[2], true); },
        {xp, wp, random_leaf({4}, 15, -0.1f, 0.1f)});
}

TEST_F(CudaGradCheck, Conv2d) {
  check([](const Inputs& t) { return conv2d(t[0], t[1], t[2], {.stride = 2, .padding = 1, .groups = 2}); },
        {random_leaf({2, 4, 5, 6}, 16), random_leaf({6, 2, 3, 3}, 17), random_leaf({6}, 18)});
  check([](const Inputs& t) { return conv2d(t[0], t[1], Tensor(), {.padding = 2, .dilation = 2}); },
        {random_leaf({1, 3, 6, 6}, 19), random_leaf({2, 3, 3, 3}, 20)});
  // Fused ReLU: positive inputs, positive weights for half the outputs and negative for
  // the rest, so every pre-activation is far from 0.
  std::vector<float> wv = random_tensor({2, 3, 3, 3}, 21, 0.5f, 1.0f).to_vector();
  std::vector<float> neg = random_tensor({2, 3, 3, 3}, 22, -1.0f, -0.5f).to_vector();
  wv.insert(wv.end(), neg.begin(), neg.end());
  check([](const Inputs& t) { return conv2d(t[0], t[1], t[2], {.padding = 1}, true); },
        {random_leaf({2, 3, 5, 5}, 23, 0.5f, 1.0f),
         Tensor::from_vector(wv, {4, 3, 3, 3}).set_requires_grad(true), random_leaf({4}, 24, -0.1f, 0.1f)});
}

TEST_F(CudaGradCheck, BatchNormTrainingAndEval) {
  Tensor x = random_leaf({3, 4, 3, 5}, 25, -1.0f, 2.0f), w = random_leaf({4}, 26, 0.5f, 1.5f),
         b = random_leaf({4}, 27);
  check([](const Inputs& t) { return batch_norm2d(t[0], t[1], t[2], Tensor(), Tensor(), true); }, {x, w, b});
  Tensor rm = random_tensor({4}, 28).to(Device::cuda(0)),
         rv = random_tensor({4}, 29, 0.5f, 1.5f).to(Device::cuda(0));
  check([&](const Inputs& t) { return batch_norm2d(t[0], t[1], t[2], rm, rv, false); }, {x, w, b});
  GradCheckOptions fine = kOnGpu;
  fine.eps = 5e-3;  // small next to the 0.5 margin times the weight
  check([](const Inputs& t) { return batch_norm2d(t[0], t[1], t[2], Tensor(), Tensor(), true, {}, true); },
        {kink_free_input({2, 3, 4, 4}, 32).set_requires_grad(true), random_leaf({3}, 33, 0.5f, 1.5f),
         Tensor::zeros({3}).set_requires_grad(true)},
        fine);
}

TEST_F(CudaGradCheck, Pooling) {
  Tensor x = distinct_tensor({2, 3, 7, 6}, 30).set_requires_grad(true);
  check([](const Inputs& t) { return max_pool2d(t[0], 3, 2, 1); }, {x});
  check([](const Inputs& t) { return max_pool2d(t[0], 2, 2); }, {x});
  check([](const Inputs& t) { return avg_pool2d(t[0], 3, 2, 1); }, {x});
  check([](const Inputs& t) { return global_avg_pool2d(t[0]); }, {x});
}

TEST_F(CudaGradCheck, ShortcutPad) {
  check([](const Inputs& t) { return shortcut_pad(t[0], 6, 2); }, {random_leaf({2, 3, 5, 4}, 31)});
}

#endif  // DPT_WITH_CUDA
