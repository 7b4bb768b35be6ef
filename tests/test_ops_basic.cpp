// Gradient checks and plain references for the plain-loop ops: relu, reductions,
// reshape, dropout, log-softmax, NLL and cross-entropy with label smoothing.
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "inputs.h"
#include "ops/activation.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/reduce.h"
#include "ops/shape.h"

using namespace dpt;
using dpt::testing::away_from_zero;
using dpt::testing::expect_gradients_match;
using dpt::testing::labels_of;
using dpt::testing::random_tensor;

namespace {

}  // namespace

TEST(Relu, ForwardAndGradient) {
  Tensor x = away_from_zero({4, 5}, 1).set_requires_grad(true);
  std::vector<float> in = x.to_vector(), out = relu(x).to_vector();
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out[i], std::max(in[i], 0.0f));
  expect_gradients_match([](const std::vector<Tensor>& v) { return relu(v[0]); }, {x});
}

TEST(Reduce, SumAndMean) {
  Tensor x = random_tensor({3, 7}, 2).set_requires_grad(true);
  double s = 0;
  for (float v : x.to_vector()) s += v;
  EXPECT_NEAR(sum(x).item(), s, 1e-5);
  EXPECT_NEAR(mean(x).item(), s / 21, 1e-6);
  expect_gradients_match([](const std::vector<Tensor>& v) { return mean(v[0]); }, {x});
  expect_gradients_match([](const std::vector<Tensor>& v) { return sum(v[0]); }, {x});
}

TEST(Shape, ReshapeFlattenGradientAndErrors) {
  Tensor x = random_tensor({2, 3, 4}, 3).set_requires_grad(true);
  EXPECT_EQ(flatten(x).shape(), (Shape{2, 12}));
  EXPECT_EQ(reshape(x, {-1, 6}).shape(), (Shape{4, 6}));
  expect_gradients_match([](const std::vector<Tensor>& v) { return mul(flatten(v[0]), 2.0f); }, {x});
  EXPECT_THROW(reshape(x, {5, -1}), Error);
}

TEST(Dropout, MaskScalesAndGradientFollowsMask) {
  Tensor x = Tensor::full({1000}, 1.0f).set_requires_grad(true);
  Rng rng(7);
  Tensor y = dropout(x, 0.25f, true, rng);
  std::vector<float> v = y.to_vector();
  int zeros = 0;
  for (float e : v) {
    EXPECT_TRUE(e == 0.0f || std::abs(e - 1.0f / 0.75f) < 1e-6);
    zeros += e == 0.0f;
  }
  EXPECT_NEAR(zeros / 1000.0, 0.25, 0.05);
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector(), v);  // d(sum)/dx = mask, equal to y for x = 1
  EXPECT_TRUE(dropout(x, 0.25f, false, rng).is_same(x));
}

TEST(Loss, CrossEntropyMatchesReferenceWithSmoothing) {
  Tensor logits = random_tensor({4, 5}, 4, -3.0f, 3.0f);
  Tensor labels = labels_of({0, 4, 2, 2});
  for (float s : {0.0f, 0.1f}) {
    std::vector<float> z = logits.to_vector();
    double expected = 0;
    for (int r = 0; r < 4; ++r) {
      double m = -1e30, sum_exp = 0;
      for (int c = 0; c < 5; ++c) m = std::max(m, static_cast<double>(z[r * 5 + c]));
      for (int c = 0; c < 5; ++c) sum_exp += std::exp(z[r * 5 + c] - m);
      for (int c = 0; c < 5; ++c) {
        double log_p = z[r * 5 + c] - m - std::log(sum_exp);
        double target = s / 5 + (c == labels.data<int64_t>()[r] ? 1 - s : 0);
        expected -= target * log_p;
      }
    }
    EXPECT_NEAR(cross_entropy(logits, labels, s).item(), expected / 4, 1e-5);
  }
  Tensor x = logits.clone().set_requires_grad(true);
  expect_gradients_match([&](const std::vector<Tensor>& v) { return cross_entropy(v[0], labels, 0.1f); }, {x});
  expect_gradients_match([&](const std::vector<Tensor>& v) { return nll_loss(log_softmax(v[0]), labels); }, {x});
  EXPECT_NEAR(nll_loss(log_softmax(logits), labels).item(), cross_entropy(logits, labels).item(), 1e-6);
  expect_gradients_match([](const std::vector<Tensor>& v) { return log_softmax(v[0]); }, {x});
}

TEST(Loss, BadLabelsAreClearErrors) {
  Tensor logits = random_tensor({2, 3}, 5);
  try {
    cross_entropy(logits, labels_of({0, 3}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 3 at row 1 is outside [0, 3)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cross_entropy(logits, labels_of({0})), Error);
  EXPECT_EQ(count_correct(Tensor::from_vector(std::vector<float>{0, 1, 5, 2}, {2, 2}), labels_of({1, 1})), 1);
}
