// Gradient checks and plain references for the plain-loop ops: relu, add_relu, reductions,
// reshape, dropout, log-softmax, NLL and cross-entropy with label smoothing. (How to add an
// op and its tests: the note at the top of test_cuda_ops.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "autograd/node.h"
#include "error_of.h"
#include "gradcheck.h"
#include "inputs.h"
#include "ops/activation.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/reduce.h"
#include "ops/shape.h"

using namespace dpt;
using dpt::testing::add_relu_away_from_zero;
using dpt::testing::add_relu_inputs;
using dpt::testing::away_from_zero;
using dpt::testing::error_of;
using dpt::testing::expect_gradients_match;
using dpt::testing::labels_of;
using dpt::testing::random_tensor;

namespace {

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(Relu, ForwardAndGradient) {
  Tensor x = away_from_zero({4, 5}, 1).set_requires_grad(true);
  std::vector<float> in = x.to_vector(), out = relu(x).to_vector();
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out[i], std::max(in[i], 0.0f));
  expect_gradients_match([](const std::vector<Tensor>& v) { return relu(v[0]); }, {x});
}

// add_relu against two references: relu(add(a, b)) run with the existing ops, bit for bit,
// and the rule written out here, max(a + b, 0) with NaN giving 0 and gradient (out > 0) ? g : 0.
// 70001 elements run the kernel's OpenMP loop, 29 its serial one.
TEST(AddRelu, MatchesReluOfAddAtZeroNaNAndInfinity) {
  for (int64_t n : {int64_t{29}, int64_t{70001}}) {
    SCOPED_TRACE(n);
    auto [a, b] = add_relu_inputs({n}, 20, true);
    Tensor ra = a.detach().clone().set_requires_grad(true), rb = b.detach().clone().set_requires_grad(true);
    Tensor out = add_relu(a, b), ref = relu(add(ra, rb));
    ASSERT_TRUE(out.grad_fn() && out.grad_fn()->name == "add_relu");
    std::vector<float> va = a.to_vector(), vb = b.to_vector(), vo = out.to_vector();
    EXPECT_TRUE(same_bits(vo, ref.to_vector()));
    Tensor g = random_tensor({n}, 21);
    out.backward(g);
    ref.backward(g);
    EXPECT_TRUE(same_bits(a.grad().to_vector(), ra.grad().to_vector()));
    EXPECT_TRUE(same_bits(b.grad().to_vector(), rb.grad().to_vector()));
    std::vector<float> vg = g.to_vector(), ga = a.grad().to_vector(), gb = b.grad().to_vector();
    int positive = 0, nan_sums = 0;
    for (int64_t i = 0; i < n; ++i) {
      float s = va[i] + vb[i];
      nan_sums += std::isnan(s);
      positive += s > 0.0f;
      ASSERT_EQ(vo[i], s > 0.0f ? s : 0.0f) << "at " << i << ": " << va[i] << " + " << vb[i];
      ASSERT_EQ(ga[i], s > 0.0f ? vg[i] : 0.0f) << "at " << i;
      ASSERT_EQ(gb[i], ga[i]) << "at " << i;
    }
    EXPECT_EQ(nan_sums, 4);  // the edges made it in
    EXPECT_GT(positive, n / 4);
  }
}

TEST(AddRelu, GradientCheckAwayFromTheKink) {
  auto [a, b] = add_relu_away_from_zero({2, 3, 4, 5}, 22);
  expect_gradients_match([](const std::vector<Tensor>& v) { return add_relu(v[0], v[1]); }, {a, b});
  // One input a constant (the other gets the whole gradient), as for a block's input.
  expect_gradients_match([b = b.detach()](const std::vector<Tensor>& v) { return add_relu(v[0], b); }, {a});
}

// Both inputs receive one gradient tensor; where they lead to one leaf (x + x, or a residual
// branch and its shortcut from the same x) the two must add up, not overwrite or double-count.
TEST(AddRelu, GradientsOfSharedInputsAddUp) {
  Tensor x = away_from_zero({6, 7}, 24).set_requires_grad(true);
  Tensor g = random_tensor({6, 7}, 25);
  add_relu(x, x).backward(g);
  std::vector<float> vx = x.to_vector(), vg = g.to_vector(), gx = x.grad().to_vector();
  for (size_t i = 0; i < vx.size(); ++i) EXPECT_FLOAT_EQ(gx[i], vx[i] > 0 ? 2 * vg[i] : 0.0f) << i;
  x.set_grad(Tensor());
  add_relu(mul(x, 3.0f), x).backward(g);  // h = 3x, out = relu(4x)
  gx = x.grad().to_vector();
  for (size_t i = 0; i < vx.size(); ++i) EXPECT_FLOAT_EQ(gx[i], vx[i] > 0 ? 4 * vg[i] : 0.0f) << i;
  EXPECT_TRUE(same_bits(g.to_vector(), vg));  // the upstream gradient is left as it was
}

TEST(AddRelu, LayoutsEmptyTensorsAndErrors) {
  auto [a, b] = add_relu_inputs({2, 3, 4, 5}, 26, true);
  Tensor ref = relu(add(a, b));
  Tensor g = random_tensor({2, 3, 4, 5}, 27);
  ref.backward(g);
  // Both channels-last: one fused pass; the output keeps the layout.
  Tensor ca = a.detach().channels_last().set_requires_grad(true);
  Tensor cb = b.detach().channels_last().set_requires_grad(true);
  Tensor out = add_relu(ca, cb);
  EXPECT_TRUE(out.is_channels_last() && !out.is_contiguous());
  EXPECT_EQ(out.grad_fn()->name, "add_relu");
  EXPECT_TRUE(same_bits(out.contiguous().to_vector(), ref.to_vector()));
  out.backward(g);
  EXPECT_TRUE(same_bits(ca.grad().contiguous().to_vector(), a.grad().to_vector()));
  EXPECT_TRUE(same_bits(cb.grad().contiguous().to_vector(), b.grad().to_vector()));
  // Mixed layouts take relu(add(a, b)).
  Tensor mixed = add_relu(a, cb);
  EXPECT_EQ(mixed.grad_fn()->name, "relu");
  EXPECT_TRUE(same_bits(mixed.contiguous().to_vector(), ref.to_vector()));
  EXPECT_EQ(add_relu(Tensor::empty({0, 3}), Tensor::empty({0, 3})).numel(), 0);
  EXPECT_NE(error_of([] {
              add_relu(Tensor::empty({2, 3}), Tensor::empty({3}));
            }).find("add_relu: expected inputs of one shape (it does not broadcast), got [2, 3] and [3]"),
            std::string::npos);
  EXPECT_NE(error_of([] { add_relu(Tensor::empty({2}), Tensor::empty({2}, DType::i64)); }).find("add_relu"),
            std::string::npos);
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

// Labels that are a strided view (every other element of a larger tensor, as a column of
// a [N, 2] table would be) must be read through their strides: the values in between are
// out of range, so reading them as if contiguous fails the label check or picks wrong rows.
TEST(Loss, StridedLabelsReadLikeTheirContiguousCopy) {
  Tensor logits = random_tensor({4, 5}, 6, -3.0f, 3.0f);
  Tensor table = labels_of({0, 99, 4, 99, 2, 99, 3, 99});
  Tensor strided = table.as_strided({4}, {2}, 0);
  ASSERT_FALSE(strided.is_contiguous());
  Tensor contiguous = labels_of({0, 4, 2, 3});
  for (float s : {0.0f, 0.1f}) {
    Tensor a = logits.clone().set_requires_grad(true), b = logits.clone().set_requires_grad(true);
    Tensor loss_strided = cross_entropy(a, strided, s), loss_contiguous = cross_entropy(b, contiguous, s);
    EXPECT_EQ(loss_strided.item(), loss_contiguous.item());
    loss_strided.backward();
    loss_contiguous.backward();
    EXPECT_TRUE(same_bits(a.grad().to_vector(), b.grad().to_vector()));
  }
  Tensor a = logits.clone().set_requires_grad(true), b = logits.clone().set_requires_grad(true);
  Tensor nll_strided = nll_loss(log_softmax(a), strided);
  Tensor nll_contiguous = nll_loss(log_softmax(b), contiguous);
  EXPECT_EQ(nll_strided.item(), nll_contiguous.item());
  nll_strided.backward();
  nll_contiguous.backward();
  EXPECT_TRUE(same_bits(a.grad().to_vector(), b.grad().to_vector()));
  EXPECT_EQ(count_correct(logits, strided), count_correct(logits, contiguous));
  // A bad label in the view is found, with its row, even where the memory between is valid.
  Tensor bad = labels_of({1, 1, 7, 1, 2, 1, 3, 1}).as_strided({4}, {2}, 0);
  EXPECT_EQ(error_of([&] { cross_entropy(logits, bad); }),
            "cross_entropy: label 7 at row 1 is outside [0, 5)");
}
