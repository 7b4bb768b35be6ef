// batch_norm2d: training outputs, running statistics (unbiased variance) and gradients,
// and eval mode, with and without the fused ReLU, against plain loops in double; the
// kernels with poisoned outputs; finite differences (also of the CPU sync_batch_norm2d on
// one rank); shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/cpu/kernels.h"
#include "gradcheck.h"
#include "inputs.h"
#include "kernel_check.h"
#include "ops/norm.h"
#include "ops/sync_batch_norm.h"

using namespace dpt;
using dpt::testing::expect_close;
using dpt::testing::expect_gradients_match;
using dpt::testing::kink_free_input;
using dpt::testing::poisoned;
using dpt::testing::random_tensor;
using dpt::testing::to_double;

namespace {

struct Reference {
  std::vector<double> out, grad_x, grad_w, grad_b, mean, var;  // var biased
};

// Training (batch statistics) when `running_mean` is empty, else eval with those stats.
Reference reference(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& grad_out, double eps,
                    bool relu, const std::vector<double>& running_mean = {},
                    const std::vector<double>& running_var = {}) {
  const Shape& s = x.shape();
  int64_t n = s[0], c = s[1], hw = s[2] * s[3];
  double count = static_cast<double>(n * hw);
  std::vector<double> vx = to_double(x), vw = to_double(w), vb = to_double(b), vg = to_double(grad_out);
  bool training = running_mean.empty();
  Reference r;
  r.out.resize(vx.size());
  r.grad_x.resize(vx.size());
  r.grad_w.assign(c, 0.0);
  r.grad_b.assign(c, 0.0);
  r.mean.assign(c, 0.0);
  r.var.assign(c, 0.0);
  auto at = [&](int64_t i, int64_t ch, int64_t j) { return (i * c + ch) * hw + j; };
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0;
    if (training) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < hw; ++j) mean += vx[at(i, ch, j)];
      mean /= count;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < hw; ++j) var += (vx[at(i, ch, j)] - mean) * (vx[at(i, ch, j)] - mean);
      var /= count;
    } else {
      mean = running_mean[ch];
      var = running_var[ch];
    }
    r.mean[ch] = mean;
    r.var[ch] = var;
    double inv_std = 1.0 / std::sqrt(var + eps);
    double sum_g = 0, sum_g_xhat = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) {
        int64_t k = at(i, ch, j);
        double xhat = (vx[k] - mean) * inv_std;
        double y = vw[ch] * xhat + vb[ch];
        if (relu && y <= 0) vg[k] = 0;
        r.out[k] = relu ? std::max(y, 0.0) : y;
        sum_g += vg[k];
        sum_g_xhat += vg[k] * xhat;
      }
    r.grad_b[ch] = sum_g;
    r.grad_w[ch] = sum_g_xhat;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) {
        int64_t k = at(i, ch, j);
        double xhat = (vx[k] - mean) * inv_std;
        r.grad_x[k] = training ? vw[ch] * inv_std / count * (count * vg[k] - sum_g - xhat * sum_g_xhat)
                               : vw[ch] * inv_std * vg[k];
      }
  }
  return r;
}

}  // namespace

TEST(BatchNormKernel, TrainingForwardAndBackwardMatchLoops) {
  uint64_t seed = 10;
  // Odd sizes with few channels (nchw path) and channel counts for nChw16c (incl. padded).
  for (Shape s : {Shape{3, 5, 7, 9}, Shape{4, 32, 14, 14}, Shape{2, 20, 5, 3}}) {
    for (bool relu : {false, true}) {
      SCOPED_TRACE(shape_str(s) + (relu ? " relu" : ""));
      Tensor x = random_tensor(s, ++seed, -2.0f, 3.0f);
      Tensor w = random_tensor({s[1]}, ++seed, 0.5f, 1.5f), b = random_tensor({s[1]}, ++seed);
      Tensor g = random_tensor(s, ++seed);
      Reference r = reference(x, w, b, g, 1e-5, relu);
      BatchNormParams p{.eps = 1e-5f, .relu = relu};
      Tensor out = poisoned(s);
      BatchNormSaved saved{
          .x = x, .weight = w, .bias = b, .mean = poisoned({s[1]}), .stat = poisoned({s[1]}), .params = p};
      cpu::batch_norm_forward(saved, out, true);
      EXPECT_EQ(saved.workspace.defined(), relu);
      expect_close(out, r.out, "forward", 1e-4, 1e-4);
      expect_close(saved.mean, r.mean, "mean", 1e-5, 1e-5);
      expect_close(saved.stat, r.var, "variance (biased)", 1e-5, 1e-4);
      Tensor gx = poisoned(s), gw = poisoned({s[1]}), gb = poisoned({s[1]});
      cpu::batch_norm_backward(saved, g, gx, gw, gb);
      expect_close(gx, r.grad_x, "grad_x", 1e-4, 1e-3);
      expect_close(gw, r.grad_w, "grad_weight", 1e-3, 1e-4);
      expect_close(gb, r.grad_b, "grad_bias", 1e-3, 1e-4);
    }
  }
}

TEST(BatchNorm, TrainingUpdatesRunningStatsWithUnbiasedVariance) {
  Shape s{3, 5, 7, 9};
  Tensor x = random_tensor(s, 1, -1.0f, 2.0f).set_requires_grad(true);
  Tensor w = random_tensor({5}, 2, 0.5f, 1.5f).set_requires_grad(true);
  Tensor b = random_tensor({5}, 3).set_requires_grad(true);
  Tensor running_mean = random_tensor({5}, 4), running_var = random_tensor({5}, 5, 0.5f, 1.5f);
  std::vector<double> rm0 = to_double(running_mean), rv0 = to_double(running_var);
  Tensor out = batch_norm2d(x, w, b, running_mean, running_var, true, {.momentum = 0.2f, .eps = 1e-3f});
  Tensor g = random_tensor(s, 6);
  out.backward(g);
  Reference r = reference(x, w, b, g, 1e-3, false);
  expect_close(out, r.out, "forward");
  expect_close(x.grad(), r.grad_x, "grad_x", 1e-4, 1e-3);
  expect_close(w.grad(), r.grad_w, "grad_weight", 1e-3, 1e-4);
  expect_close(b.grad(), r.grad_b, "grad_bias", 1e-3, 1e-4);
  double count = 3 * 7 * 9;
  std::vector<double> rm(5), rv(5);
  for (int c = 0; c < 5; ++c) {
    rm[c] = 0.8 * rm0[c] + 0.2 * r.mean[c];
    rv[c] = 0.8 * rv0[c] + 0.2 * r.var[c] * count / (count - 1);
  }
  expect_close(running_mean, rm, "running_mean", 1e-6, 1e-5);
  expect_close(running_var, rv, "running_var", 1e-6, 1e-5);
}

TEST(BatchNorm, EvalUsesRunningStatsAndLeavesThem) {
  for (Shape s : {Shape{3, 5, 7, 9}, Shape{2, 16, 6, 6}}) {
    for (bool relu : {false, true}) {
      SCOPED_TRACE(shape_str(s) + (relu ? " relu" : ""));
      Tensor x = random_tensor(s, 1, -1.0f, 2.0f).set_requires_grad(true);
      Tensor w = random_tensor({s[1]}, 2, 0.5f, 1.5f).set_requires_grad(true);
      Tensor b = random_tensor({s[1]}, 3).set_requires_grad(true);
      Tensor running_mean = random_tensor({s[1]}, 4), running_var = random_tensor({s[1]}, 5, 0.5f, 1.5f);
      std::vector<double> rm = to_double(running_mean), rv = to_double(running_var);
      Tensor out = batch_norm2d(x, w, b, running_mean, running_var, false, {}, relu);
      Tensor g = random_tensor(s, 6);
      out.backward(g);
      Reference r = reference(x, w, b, g, 1e-5, relu, rm, rv);
      expect_close(out, r.out, "forward");
      expect_close(x.grad(), r.grad_x, "grad_x");
      expect_close(w.grad(), r.grad_w, "grad_weight", 1e-3, 1e-4);
      expect_close(b.grad(), r.grad_b, "grad_bias", 1e-3, 1e-4);
      EXPECT_EQ(to_double(running_mean), rm);
      EXPECT_EQ(to_double(running_var), rv);
      // Without a tape the eval forward takes oneDNN's inference path: same numbers.
      autograd::NoGrad no_grad;
      expect_close(batch_norm2d(x, w, b, running_mean, running_var, false, {}, relu), r.out,
                   "inference path");
    }
  }
}

TEST(BatchNorm, GradientCheck) {
  auto x = random_tensor({3, 4, 3, 5}, 1, -1.0f, 2.0f).set_requires_grad(true);
  auto w = random_tensor({4}, 2, 0.5f, 1.5f).set_requires_grad(true);
  auto b = random_tensor({4}, 3).set_requires_grad(true);
  expect_gradients_match(
      [](const std::vector<Tensor>& t) { return batch_norm2d(t[0], t[1], t[2], Tensor(), Tensor(), true); },
      {x, w, b});
  Tensor rm = random_tensor({4}, 4), rv = random_tensor({4}, 5, 0.5f, 1.5f);
  expect_gradients_match(
      [&](const std::vector<Tensor>& t) { return batch_norm2d(t[0], t[1], t[2], rm, rv, false); }, {x, w, b});
}

TEST(BatchNorm, GradientCheckFusedReluAwayFromZero) {
  auto x = kink_free_input({2, 3, 4, 4}, 1).set_requires_grad(true);
  auto w = random_tensor({3}, 2, 0.5f, 1.5f).set_requires_grad(true);
  auto b = Tensor::zeros({3}).set_requires_grad(true);
  // eps of the check is small next to the 0.5 margin times the weight.
  expect_gradients_match(
      [](const std::vector<Tensor>& t) {
        return batch_norm2d(t[0], t[1], t[2], Tensor(), Tensor(), true, {}, true);
      },
      {x, w, b}, {.eps = 5e-3});
}

TEST(SyncBatchNorm, GradientCheckOnOneRank) {
  // The CPU path with the cross-rank sum of one rank (nothing to add); at 2-4 ranks:
  // tests/test_mpi_sync_bn.cpp.
  auto x = random_tensor({3, 4, 3, 5}, 1, -1.0f, 2.0f).set_requires_grad(true);
  auto w = random_tensor({4}, 2, 0.5f, 1.5f).set_requires_grad(true);
  auto b = random_tensor({4}, 3).set_requires_grad(true);
  expect_gradients_match(
      [](const std::vector<Tensor>& t) {
        return sync_batch_norm2d(t[0], t[1], t[2], Tensor(), Tensor(), {}, [](const Tensor&) {});
      },
      {x, w, b});
}

TEST(BatchNorm, ShapeErrors) {
  Tensor x = Tensor::zeros({2, 3, 4, 4});
  try {
    batch_norm2d(x, Tensor::zeros({4}), Tensor::zeros({3}), Tensor(), Tensor(), true);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "batch_norm2d: weight [4] does not match input [2, 3, 4, 4]: expected [3]");
  }
  EXPECT_THROW(batch_norm2d(x, Tensor::zeros({3}), Tensor::zeros({3}), Tensor(), Tensor(), false), Error);
  EXPECT_THROW(batch_norm2d(Tensor::zeros({1, 3, 1, 1}), Tensor::zeros({3}), Tensor::zeros({3}), Tensor(),
                            Tensor(), true),
               Error);  // one value per channel
}
