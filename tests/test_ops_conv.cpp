// conv2d: the oneDNN kernels against plain loops in double (forward, backward-data,
// backward-weights, bias; strides, padding, dilation, groups, depthwise, odd sizes, the
// blocked-layout channel counts), the op's fused ReLU and skipped passes, finite
// differences, and the one-line shape errors.
//
// How to add an op and its test: the op in framework/ops/<family>.cpp, its kernel in
// backend/cpu/; here a reference loop in double, kernel outputs poisoned first
// (kernel_check.h), and a gradient check (gradcheck.h) on inputs away from kinks.
#include <gtest/gtest.h>

#include "backend/cpu/kernels.h"
#include "core/threading.h"
#include "gradcheck.h"
#include "kernel_check.h"
#include "ops/conv.h"

using namespace dpt;
using dpt::testing::expect_close;
using dpt::testing::expect_gradients_match;
using dpt::testing::poisoned;
using dpt::testing::random_tensor;
using dpt::testing::to_double;

namespace {

struct Case {
  int64_t n, c, h, w, oc, kh, kw;
  Conv2dOptions o;
  bool bias;
};

std::string case_str(const Case& k) {
  return "N" + std::to_string(k.n) + " C" + std::to_string(k.c) + " " + std::to_string(k.h) + "x" +
         std::to_string(k.w) + " OC" + std::to_string(k.oc) + " k" + std::to_string(k.kh) + "x" +
         std::to_string(k.kw) + " s" + std::to_string(k.o.stride) + " p" + std::to_string(k.o.padding) +
         " d" + std::to_string(k.o.dilation) + " g" + std::to_string(k.o.groups) + (k.bias ? " bias" : "");
}

int64_t out_size(int64_t in, int64_t k, const Conv2dOptions& o) {
  return (in + 2 * o.padding - o.dilation * (k - 1) - 1) / o.stride + 1;
}

// The convolution written out, with a visitor for each (output, input, weight) triple;
// forward and both backward passes are this loop with different bodies.
template <class F>
void for_each_tap(const Case& k, F f) {
  int64_t oh = out_size(k.h, k.kh, k.o), ow = out_size(k.w, k.kw, k.o);
  int64_t icg = k.c / k.o.groups, ocg = k.oc / k.o.groups;
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t oc = 0; oc < k.oc; ++oc) {
      int64_t g = oc / ocg;
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x) {
          int64_t out_i = ((n * k.oc + oc) * oh + y) * ow + x;
          for (int64_t ic = 0; ic < icg; ++ic)
            for (int64_t ky = 0; ky < k.kh; ++ky)
              for (int64_t kx = 0; kx < k.kw; ++kx) {
                int64_t iy = y * k.o.stride - k.o.padding + ky * k.o.dilation;
                int64_t ix = x * k.o.stride - k.o.padding + kx * k.o.dilation;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                int64_t in_i = ((n * k.c + g * icg + ic) * k.h + iy) * k.w + ix;
                int64_t w_i = ((oc * icg + ic) * k.kh + ky) * k.kw + kx;
                f(out_i, in_i, w_i);
              }
        }
    }
}

struct Reference {
  std::vector<double> out, grad_x, grad_w, grad_b;
};

// grad_out is the gradient at the output (after the ReLU when relu).
Reference reference(const Case& k, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& grad_out,
                    bool relu) {
  std::vector<double> vx = to_double(x), vw = to_double(w), vg = to_double(grad_out);
  Reference r;
  int64_t oh = out_size(k.h, k.kh, k.o), ow = out_size(k.w, k.kw, k.o), plane = oh * ow;
  r.out.assign(k.n * k.oc * plane, 0.0);
  if (k.bias) {
    std::vector<double> vb = to_double(b);
    for (size_t i = 0; i < r.out.size(); ++i) r.out[i] = vb[(i / plane) % k.oc];
  }
  for_each_tap(k, [&](int64_t o, int64_t i, int64_t wi) { r.out[o] += vx[i] * vw[wi]; });
  if (relu)
    for (size_t i = 0; i < r.out.size(); ++i) {
      if (r.out[i] <= 0) vg[i] = 0;
      r.out[i] = std::max(r.out[i], 0.0);
    }
  r.grad_x.assign(vx.size(), 0.0);
  r.grad_w.assign(vw.size(), 0.0);
  r.grad_b.assign(k.oc, 0.0);
  for_each_tap(k, [&](int64_t o, int64_t i, int64_t wi) {
    r.grad_x[i] += vg[o] * vw[wi];
    r.grad_w[wi] += vg[o] * vx[i];
  });
  for (size_t i = 0; i < vg.size(); ++i) r.grad_b[(i / plane) % k.oc] += vg[i];
  return r;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {3, 5, 7, 9, 4, 3, 3, {.padding = 1}, true},                                // odd sizes
      {2, 4, 9, 8, 6, 3, 3, {.stride = 2}, false},                                // stride 2, no padding
      {2, 4, 11, 10, 6, 3, 3, {.padding = 2, .dilation = 2, .groups = 2}, true},  // dilation, groups
      {2, 8, 9, 9, 8, 3, 3, {.stride = 2, .padding = 1, .groups = 8}, true},      // depthwise
      {2, 6, 7, 6, 5, 1, 1, {.stride = 2}, true},                                 // 1x1, stride 2
      {2, 3, 8, 11, 4, 3, 5, {.padding = 1}, true},                               // non-square kernel
      {2, 32, 14, 14, 64, 3, 3, {.padding = 1}, true},              // nChw16c path, as mnist_cnn
      {3, 17, 9, 7, 33, 3, 3, {.stride = 2, .padding = 1}, false},  // channels padded to 16s
      {4, 1, 12, 12, 16, 3, 3, {.padding = 1}, true},               // one input channel
  };
  return all;
}

}  // namespace

TEST(Conv2dKernel, ForwardAndBackwardMatchLoops) {
  uint64_t seed = 10;
  for (const Case& k : cases()) {
    for (bool relu : {false, true}) {
      SCOPED_TRACE(case_str(k) + (relu ? " relu" : ""));
      Tensor x = random_tensor({k.n, k.c, k.h, k.w}, ++seed);
      Tensor w = random_tensor({k.oc, k.c / k.o.groups, k.kh, k.kw}, ++seed);
      Tensor b = k.bias ? random_tensor({k.oc}, ++seed) : Tensor();
      Shape out_shape{k.n, k.oc, out_size(k.h, k.kh, k.o), out_size(k.w, k.kw, k.o)};
      Tensor g = random_tensor(out_shape, ++seed);
      Reference r = reference(k, x, w, b, g, relu);
      ConvParams p{k.o.stride, k.o.padding, k.o.dilation, k.o.groups};

      Tensor out = poisoned(out_shape);
      cpu::conv2d_forward(x, w, b, p, relu, out);
      expect_close(out, r.out, "forward", 1e-4, 1e-4);
      if (relu) continue;  // the kernel's backward takes an already-masked gradient

      Tensor gx = poisoned(x.shape()), gw = poisoned(w.shape()), gb = poisoned({k.oc});
      cpu::conv2d_backward(x.shape(), w.shape(), x, w, g, p, gx, gw, gb);
      expect_close(gx, r.grad_x, "grad_x", 1e-4, 1e-4);
      expect_close(gw, r.grad_w, "grad_w", 1e-4, 1e-4);
      expect_close(gb, r.grad_b, "grad_bias", 1e-4, 1e-4);
      // Each pass alone, and weights without bias.
      Tensor gx2 = poisoned(x.shape());
      cpu::conv2d_backward(x.shape(), w.shape(), Tensor(), w, g, p, gx2, Tensor(), Tensor());
      expect_close(gx2, r.grad_x, "grad_x alone", 1e-4, 1e-4);
      Tensor gw2 = poisoned(w.shape());
      cpu::conv2d_backward(x.shape(), w.shape(), x, Tensor(), g, p, Tensor(), gw2, Tensor());
      expect_close(gw2, r.grad_w, "grad_w alone", 1e-4, 1e-4);
      Tensor gb2 = poisoned({k.oc});
      cpu::conv2d_backward(x.shape(), w.shape(), x, Tensor(), g, p, Tensor(), Tensor(), gb2);
      expect_close(gb2, r.grad_b, "grad_bias alone", 1e-4, 1e-4);
    }
  }
}

TEST(Conv2d, OpBackwardWithFusedReluMatchesLoops) {
  Case k{3, 5, 7, 9, 6, 3, 3, {.stride = 2, .padding = 1}, true};
  Tensor x = random_tensor({k.n, k.c, k.h, k.w}, 1).set_requires_grad(true);
  Tensor w = random_tensor({k.oc, k.c, k.kh, k.kw}, 2).set_requires_grad(true);
  Tensor b = random_tensor({k.oc}, 3).set_requires_grad(true);
  Tensor out = conv2d(x, w, b, k.o, true);
  Tensor g = random_tensor(out.shape(), 4);
  out.backward(g);
  Reference r = reference(k, x, w, b, g, true);
  expect_close(out, r.out, "forward");
  expect_close(x.grad(), r.grad_x, "grad_x");
  expect_close(w.grad(), r.grad_w, "grad_w");
  expect_close(b.grad(), r.grad_b, "grad_bias");
}

TEST(Conv2d, FirstLayerGetsNoInputGradient) {
  Tensor x = random_tensor({2, 1, 8, 8}, 1);  // data: no gradient wanted
  Tensor w = random_tensor({4, 1, 3, 3}, 2).set_requires_grad(true);
  Tensor out = conv2d(x, w, Tensor(), {.padding = 1});
  out.backward(random_tensor(out.shape(), 3));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(w.grad().defined());
}

TEST(Conv2d, NonContiguousInputIsAccepted) {
  Tensor base = random_tensor({2, 3, 6, 5}, 1);
  // A transposed view of H and W: same values as a contiguous copy of it.
  Tensor view = base.as_strided({2, 3, 5, 6}, {90, 30, 1, 5}, 0);
  Tensor w = random_tensor({4, 3, 3, 3}, 2);
  std::vector<float> a = conv2d(view, w, Tensor()).to_vector(),
                     b = conv2d(view.contiguous(), w, Tensor()).to_vector();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(a[i], b[i]);
}

TEST(Conv2d, SameResultAfterThreadCountChanges) {
  // Primitives are cached per thread count (oneDNN splits work at creation).
  Tensor x = random_tensor({4, 32, 10, 10}, 1), w = random_tensor({32, 32, 3, 3}, 2),
         b = random_tensor({32}, 3);
  int before = threads_get();
  threads_set(1);
  std::vector<float> one = conv2d(x, w, b, {.padding = 1}).to_vector();
  threads_set(2);
  std::vector<float> two = conv2d(x, w, b, {.padding = 1}).to_vector();
  threads_set(before);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(one[i], two[i], 1e-4);
}

TEST(Conv2d, GradientCheck) {
  auto x = random_tensor({2, 4, 5, 6}, 1).set_requires_grad(true);
  auto w = random_tensor({6, 2, 3, 3}, 2).set_requires_grad(true);
  auto b = random_tensor({6}, 3).set_requires_grad(true);
  expect_gradients_match(
      [](const std::vector<Tensor>& t) {
        return conv2d(t[0], t[1], t[2], {.stride = 2, .padding = 1, .dilation = 1, .groups = 2});
      },
      {x, w, b});
  expect_gradients_match(
      [](const std::vector<Tensor>& t) {
        return conv2d(t[0], t[1], Tensor(), {.padding = 2, .dilation = 2});
      },
      {random_tensor({1, 3, 6, 6}, 4).set_requires_grad(true),
       random_tensor({2, 3, 3, 3}, 5).set_requires_grad(true)});
}

TEST(Conv2d, GradientCheckFusedReluAwayFromZero) {
  // Positive inputs; weights positive for half the output channels, negative for the
  // rest: every pre-activation is far from 0, so no finite difference crosses the kink.
  auto x = random_tensor({2, 3, 5, 5}, 1, 0.5f, 1.0f).set_requires_grad(true);
  Tensor w = Tensor::empty({4, 3, 3, 3});
  {
    Tensor pos = random_tensor({2, 3, 3, 3}, 2, 0.5f, 1.0f),
           neg = random_tensor({2, 3, 3, 3}, 3, -1.0f, -0.5f);
    std::vector<float> v = pos.to_vector(), n = neg.to_vector();
    v.insert(v.end(), n.begin(), n.end());
    w = Tensor::from_vector(v, {4, 3, 3, 3});
  }
  w.set_requires_grad(true);
  auto b = random_tensor({4}, 4, -0.1f, 0.1f).set_requires_grad(true);
  expect_gradients_match(
      [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], {.padding = 1}, true); }, {x, w, b});
}

TEST(Conv2d, ShapeErrorsNameOpAndShapes) {
  Tensor x = Tensor::zeros({8, 3, 32, 32});
  try {
    conv2d(x, Tensor::zeros({16, 4, 3, 3}), Tensor());
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "conv2d: input [8, 3, 32, 32] has 3 channels but weight [16, 4, 3, 3] expects 4 (groups 1)");
  }
  try {
    conv2d(x, Tensor::zeros({16, 3, 3, 3}), Tensor::zeros({8}));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "conv2d: bias [8] does not match weight [16, 3, 3, 3]: expected [16]");
  }
  EXPECT_THROW(conv2d(Tensor::zeros({1, 3, 2, 2}), Tensor::zeros({4, 3, 5, 5}), Tensor()), Error);
  EXPECT_THROW(conv2d(Tensor::zeros({3, 32, 32}), Tensor::zeros({4, 3, 3, 3}), Tensor()), Error);
  EXPECT_THROW(conv2d(x, Tensor::zeros({16, 1, 3, 3}), Tensor(), {.groups = 3}), Error);  // 16 % 3
}
