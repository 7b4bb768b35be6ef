// Pooling: the oneDNN max/avg kernels against plain loops in double (odd sizes, stride
// different from the kernel, padding, the blocked-layout channel counts), global average
// pooling, finite differences on tie-free inputs, and the shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "backend/cpu/kernels.h"
#include "gradcheck.h"
#include "inputs.h"
#include "kernel_check.h"
#include "ops/pool.h"

using namespace dpt;
using dpt::testing::distinct_tensor;
using dpt::testing::expect_close;
using dpt::testing::expect_gradients_match;
using dpt::testing::poisoned;
using dpt::testing::random_tensor;
using dpt::testing::to_double;

namespace {

struct Case {
  int64_t n, c, h, w, kernel, stride, padding;
};

std::string case_str(const Case& k) {
  return "N" + std::to_string(k.n) + " C" + std::to_string(k.c) + " " + std::to_string(k.h) + "x" +
         std::to_string(k.w) + " k" + std::to_string(k.kernel) + " s" + std::to_string(k.stride) + " p" +
         std::to_string(k.padding);
}

int64_t out_size(int64_t in, const Case& k) { return (in + 2 * k.padding - k.kernel) / k.stride + 1; }

struct Reference {
  std::vector<double> out, grad_x;
};

Reference reference(PoolKind kind, const Case& k, const Tensor& x, const Tensor& grad_out) {
  std::vector<double> vx = to_double(x), vg = to_double(grad_out);
  int64_t oh = out_size(k.h, k), ow = out_size(k.w, k);
  Reference r;
  r.out.assign(k.n * k.c * oh * ow, 0.0);
  r.grad_x.assign(vx.size(), 0.0);
  for (int64_t plane = 0; plane < k.n * k.c; ++plane)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t x = 0; x < ow; ++x) {
        int64_t o = (plane * oh + y) * ow + x;
        double best = -INFINITY, sum = 0;
        int64_t best_i = -1;
        for (int64_t ky = 0; ky < k.kernel; ++ky)
          for (int64_t kx = 0; kx < k.kernel; ++kx) {
            int64_t iy = y * k.stride - k.padding + ky, ix = x * k.stride - k.padding + kx;
            if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;  // padding: -inf for max, 0 for avg
            int64_t i = (plane * k.h + iy) * k.w + ix;
            sum += vx[i];
            if (vx[i] > best) best = vx[i], best_i = i;
          }
        if (kind == PoolKind::max) {
          r.out[o] = best;
          r.grad_x[best_i] += vg[o];
        } else {
          double count = static_cast<double>(k.kernel * k.kernel);  // padding counted
          r.out[o] = sum / count;
          for (int64_t ky = 0; ky < k.kernel; ++ky)
            for (int64_t kx = 0; kx < k.kernel; ++kx) {
              int64_t iy = y * k.stride - k.padding + ky, ix = x * k.stride - k.padding + kx;
              if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
              r.grad_x[(plane * k.h + iy) * k.w + ix] += vg[o] / count;
            }
        }
      }
  return r;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {3, 5, 7, 9, 2, 2, 0},     // odd sizes: the last row and column are dropped
      {2, 3, 9, 8, 3, 2, 1},     // stride != kernel, padding
      {2, 4, 7, 7, 3, 1, 1},     // overlapping windows
      {2, 6, 10, 11, 3, 3, 0},   // stride == kernel 3
      {2, 32, 14, 14, 2, 2, 0},  // nChw16c path, as mnist_cnn
      {2, 20, 9, 7, 3, 2, 1},    // nChw16c with channels padded to 32
      {1, 2, 5, 5, 5, 1, 2},     // window as large as the input
  };
  return all;
}

}  // namespace

TEST(PoolKernel, MaxAndAvgMatchLoops) {
  uint64_t seed = 10;
  for (PoolKind kind : {PoolKind::max, PoolKind::avg}) {
    for (const Case& k : cases()) {
      SCOPED_TRACE(std::string(kind == PoolKind::max ? "max " : "avg ") + case_str(k));
      Shape xs{k.n, k.c, k.h, k.w}, os{k.n, k.c, out_size(k.h, k), out_size(k.w, k)};
      Tensor x = distinct_tensor(xs, ++seed, 0.01f);
      Tensor g = random_tensor(os, ++seed);
      Reference r = reference(kind, k, x, g);
      PoolParams p{k.kernel, k.stride, k.padding};
      // Inference (no workspace) and training forwards.
      Tensor out = poisoned(os);
      PoolSaved inference;
      cpu::pool2d_forward(kind, x, p, out, false, inference);
      expect_close(out, r.out, "forward, inference", 1e-5, 1e-5);
      EXPECT_FALSE(inference.workspace.defined());
      Tensor out2 = poisoned(os);
      PoolSaved saved;
      cpu::pool2d_forward(kind, x, p, out2, true, saved);
      expect_close(out2, r.out, "forward, training", 1e-5, 1e-5);
      EXPECT_EQ(saved.workspace.defined(), kind == PoolKind::max);
      Tensor gx = poisoned(xs);
      cpu::pool2d_backward(kind, saved, g, p, gx);
      expect_close(gx, r.grad_x, "grad_x", 1e-5, 1e-5);
    }
  }
}

TEST(Pool, OpsMatchLoopsThroughAutograd) {
  Case k{3, 5, 7, 9, 3, 2, 1};
  for (PoolKind kind : {PoolKind::max, PoolKind::avg}) {
    Tensor x = distinct_tensor({k.n, k.c, k.h, k.w}, 1).set_requires_grad(true);
    Tensor out = kind == PoolKind::max ? max_pool2d(x, k.kernel, k.stride, k.padding)
                                            : avg_pool2d(x, k.kernel, k.stride, k.padding);
    Tensor g = random_tensor(out.shape(), 2);
    out.backward(g);
    Reference r = reference(kind, k, x, g);
    expect_close(out, r.out, "forward", 1e-5, 1e-5);
    expect_close(x.grad(), r.grad_x, "grad_x", 1e-5, 1e-5);
  }
}

TEST(Pool, GlobalAvgPoolMatchesLoops) {
  Tensor x = random_tensor({3, 5, 7, 9}, 1).set_requires_grad(true);
  Tensor out = global_avg_pool2d(x);
  ASSERT_EQ(out.shape(), (Shape{3, 5}));
  Tensor g = random_tensor({3, 5}, 2);
  out.backward(g);
  std::vector<double> vx = to_double(x), vg = to_double(g), ref(15, 0.0), ref_gx(vx.size());
  for (size_t i = 0; i < vx.size(); ++i) ref[i / 63] += vx[i] / 63.0;
  for (size_t i = 0; i < vx.size(); ++i) ref_gx[i] = vg[i / 63] / 63.0;
  expect_close(out, ref, "forward", 1e-5, 1e-5);
  expect_close(x.grad(), ref_gx, "grad_x", 1e-6, 1e-5);
}

TEST(Pool, GradientCheck) {
  auto x = distinct_tensor({2, 3, 7, 6}, 1).set_requires_grad(true);
  expect_gradients_match([](const std::vector<Tensor>& t) { return max_pool2d(t[0], 3, 2, 1); }, {x});
  expect_gradients_match([](const std::vector<Tensor>& t) { return max_pool2d(t[0], 2, 2); }, {x});
  expect_gradients_match([](const std::vector<Tensor>& t) { return avg_pool2d(t[0], 3, 2, 1); }, {x});
  expect_gradients_match([](const std::vector<Tensor>& t) { return global_avg_pool2d(t[0]); }, {x});
}

TEST(Pool, NoGradForwardMatchesTrainingForward) {
  Tensor x = distinct_tensor({2, 16, 8, 8}, 1);
  Tensor a = max_pool2d(x, 2, 2);
  Tensor xg = x.clone().set_requires_grad(true);
  Tensor b = max_pool2d(xg, 2, 2);
  EXPECT_EQ(a.to_vector(), b.to_vector());
}

TEST(Pool, ShapeErrors) {
  try {
    max_pool2d(Tensor::zeros({2, 3, 1, 1}), 2, 2);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "max_pool2d: input [2, 3, 1, 1] with padding 0 is smaller than the 2x2 window");
  }
  EXPECT_THROW(avg_pool2d(Tensor::zeros({2, 3, 8, 8}), 2, 2, 2), Error);  // padding > kernel / 2
  EXPECT_THROW(max_pool2d(Tensor::zeros({3, 8, 8}), 2, 2), Error);
  EXPECT_THROW(global_avg_pool2d(Tensor::zeros({3, 8})), Error);
}
