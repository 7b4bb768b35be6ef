// linear and matmul: the oneDNN matmul kernel (all four transpose combinations, bias,
// ReLU) against plain loops in double, the ops' forward and backward, finite
// differences, and the shape errors.
#include <gtest/gtest.h>

#include "backend/cpu/kernels.h"
#include "gradcheck.h"
#include "kernel_check.h"
#include "ops/linear.h"

using namespace dpt;
using dpt::testing::expect_close;
using dpt::testing::expect_gradients_match;
using dpt::testing::poisoned;
using dpt::testing::random_tensor;
using dpt::testing::to_double;

namespace {

// c = op(a) op(b) (+ bias) (relu), in double; a, b row-major as stored.
std::vector<double> reference_matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& bias,
                                     bool relu) {
  std::vector<double> va = to_double(a), vb = to_double(b);
  int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1), n = tb ? b.size(0) : b.size(1);
  std::vector<double> vbias = bias.defined() ? to_double(bias) : std::vector<double>(n, 0.0);
  std::vector<double> c(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = vbias[j];
      for (int64_t p = 0; p < k; ++p) s += va[ta ? p * m + i : i * k + p] * vb[tb ? j * k + p : p * n + j];
      c[i * n + j] = relu ? std::max(s, 0.0) : s;
    }
  return c;
}

}  // namespace

TEST(MatmulKernel, TransposesBiasAndReluMatchLoops) {
  const int64_t m = 13, k = 37, n = 11;
  uint64_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool with_bias : {false, true})
        for (bool relu : {false, true}) {
          SCOPED_TRACE(std::string("ta ") + std::to_string(ta) + " tb " + std::to_string(tb) + " bias " +
                       std::to_string(with_bias) + " relu " + std::to_string(relu));
          Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, ++seed);
          Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, ++seed);
          Tensor bias = with_bias ? random_tensor({n}, ++seed) : Tensor();
          Tensor c = poisoned({m, n});
          cpu::matmul(a, ta, b, tb, bias, relu, c);
          expect_close(c, reference_matmul(a, ta, b, tb, bias, relu), "c", 1e-5, 1e-4);
        }
}

TEST(MatmulKernel, SumRows) {
  Tensor t = random_tensor({130, 77}, 1);
  Tensor out = poisoned({77});
  cpu::sum_rows(t, out);
  std::vector<double> v = to_double(t), ref(77, 0.0);
  for (size_t i = 0; i < v.size(); ++i) ref[i % 77] += v[i];
  expect_close(out, ref, "sums", 1e-5, 1e-5);
}

TEST(Linear, ForwardAndBackwardMatchLoops) {
  for (bool relu : {false, true}) {
    Tensor x = random_tensor({9, 23}, 1).set_requires_grad(true);
    Tensor w = random_tensor({7, 23}, 2).set_requires_grad(true);
    Tensor b = random_tensor({7}, 3).set_requires_grad(true);
    Tensor out = linear(x, w, b, relu);
    Tensor g = random_tensor({9, 7}, 4);
    out.backward(g);
    std::vector<double> ref = reference_matmul(x, false, w, true, b, relu);
    expect_close(out, ref, "forward", 1e-5, 1e-4);
    // Masked gradient, then gx = g w, gw = g^T x, gb = sum over rows.
    std::vector<float> gv = g.to_vector();
    for (size_t i = 0; i < gv.size(); ++i)
      if (relu && ref[i] <= 0) gv[i] = 0;
    Tensor gm = Tensor::from_vector(gv, {9, 7});
    expect_close(x.grad(), reference_matmul(gm, false, w, false, Tensor(), false), "grad_x", 1e-5, 1e-4);
    expect_close(w.grad(), reference_matmul(gm, true, x, false, Tensor(), false), "grad_w", 1e-5, 1e-4);
    std::vector<double> gb(7, 0.0);
    for (size_t i = 0; i < gv.size(); ++i) gb[i % 7] += gv[i];
    expect_close(b.grad(), gb, "grad_bias", 1e-5, 1e-4);
  }
}

TEST(Matmul, ForwardAndBackwardMatchLoops) {
  Tensor a = random_tensor({6, 10}, 1).set_requires_grad(true);
  Tensor b = random_tensor({10, 5}, 2).set_requires_grad(true);
  Tensor out = matmul(a, b);
  Tensor g = random_tensor({6, 5}, 3);
  out.backward(g);
  expect_close(out, reference_matmul(a, false, b, false, Tensor(), false), "forward", 1e-5, 1e-4);
  expect_close(a.grad(), reference_matmul(g, false, b, true, Tensor(), false), "grad_a", 1e-5, 1e-4);
  expect_close(b.grad(), reference_matmul(a, true, g, false, Tensor(), false), "grad_b", 1e-5, 1e-4);
}

TEST(Linear, GradientCheck) {
  auto x = random_tensor({5, 8}, 1).set_requires_grad(true);
  auto w = random_tensor({4, 8}, 2).set_requires_grad(true);
  auto b = random_tensor({4}, 3).set_requires_grad(true);
  expect_gradients_match([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); }, {x, w, b});
  expect_gradients_match([](const std::vector<Tensor>& t) { return linear(t[0], t[1], Tensor()); }, {x, w});
  expect_gradients_match(
      [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); },
      {random_tensor({3, 6}, 4).set_requires_grad(true), random_tensor({6, 4}, 5).set_requires_grad(true)});
}

TEST(Linear, GradientCheckFusedReluAwayFromZero) {
  // Positive inputs; weights positive for half the outputs, negative for the rest.
  auto x = random_tensor({4, 6}, 1, 0.5f, 1.0f).set_requires_grad(true);
  std::vector<float> wv = random_tensor({3, 6}, 2, 0.5f, 1.0f).to_vector();
  std::vector<float> neg = random_tensor({3, 6}, 3, -1.0f, -0.5f).to_vector();
  wv.insert(wv.end(), neg.begin(), neg.end());
  auto w = Tensor::from_vector(wv, {6, 6}).set_requires_grad(true);
  auto b = random_tensor({6}, 4, -0.1f, 0.1f).set_requires_grad(true);
  expect_gradients_match([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2], true); },
                         {x, w, b});
}

TEST(Linear, ShapeErrors) {
  try {
    linear(Tensor::zeros({128, 3136}), Tensor::zeros({128, 3137}), Tensor());
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "linear: input [128, 3136] has 3136 features but weight [128, 3137] expects 3137");
  }
  try {
    matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "matmul: shapes [2, 3] and [4, 5] do not multiply (need [M, K] and [K, N])");
  }
  EXPECT_THROW(linear(Tensor::zeros({2, 3, 4}), Tensor::zeros({5, 4}), Tensor()), Error);
  EXPECT_THROW(linear(Tensor::zeros({2, 4}), Tensor::zeros({5, 4}), Tensor::zeros({4})), Error);
}
