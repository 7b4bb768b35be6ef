// Channels-last (NHWC-strided) activations: the core layout helpers, every op that takes
// them giving the values and gradients of the NCHW path, conv2d's channels-last output,
// gradients of mixed layouts summed, and a whole ResNet-20 step equal in both modes
// (DPT_CHANNELS_LAST on and off).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "backend/cpu/onednn.h"
#include "core/rng.h"
#include "models/registry.h"
#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/shape.h"
#include "ops/shortcut_pad.h"

using namespace dpt;

namespace {

Tensor uniform(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Rng(seed).fill_uniform(t, -1.0f, 1.0f);
  return t;
}

void expect_near_all(const std::vector<float>& a, const std::vector<float>& b, float tol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  float scale = 1e-6f;
  for (float v : b) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tol * scale) << what << " differs at " << i;
}

// Runs f on x as NCHW and as channels-last; the outputs must agree in value, and the
// gradients of x (and of `params`) under the same upstream gradient too. The upstream
// gradient is a plain NCHW tensor, so every op also meets a gradient in a layout other
// than its output's.
using UnaryOp = std::function<Tensor(const Tensor&)>;
void expect_layouts_agree(const UnaryOp& f, const Tensor& x_values, bool expect_channels_last_out,
                          const std::vector<Tensor>& params = {}) {
  std::vector<std::vector<float>> outs, grads;
  for (bool channels_last : {false, true}) {
    Tensor x = channels_last ? x_values.channels_last() : x_values.contiguous();
    x = x.detach();
    x.set_requires_grad(true);
    for (const Tensor& p : params) p.set_grad(Tensor());
    Tensor out = f(x);
    if (channels_last && expect_channels_last_out) {
      EXPECT_TRUE(out.is_channels_last());
    }
    out.backward(uniform(out.shape(), 77));
    outs.push_back(out.to_vector());
    grads.push_back(x.grad().to_vector());
    for (const Tensor& p : params) grads.push_back(p.grad().to_vector());
  }
  expect_near_all(outs[1], outs[0], 1e-5f, "output");
  size_t per_mode = grads.size() / 2;
  for (size_t i = 0; i < per_mode; ++i) expect_near_all(grads[per_mode + i], grads[i], 1e-5f, "gradient");
}

}  // namespace

TEST(ChannelsLast, TensorLayoutHelpers) {
  Tensor x = uniform({2, 3, 4, 5}, 1);
  Tensor cl = x.channels_last();
  EXPECT_EQ(cl.strides(), (Shape{60, 1, 15, 3}));
  EXPECT_TRUE(cl.is_channels_last() && cl.is_dense());
  EXPECT_FALSE(cl.is_contiguous());
  EXPECT_FALSE(x.is_channels_last());
  EXPECT_EQ(cl.to_vector(), x.to_vector());                // NHWC -> NCHW transpose
  EXPECT_EQ(cl.contiguous().to_vector(), x.to_vector());
  EXPECT_TRUE(cl.clone_preserving_strides().is_channels_last());
  EXPECT_TRUE(cl.clone().is_contiguous());
  EXPECT_TRUE(Tensor::empty_like(cl).is_channels_last());
  // A slice is neither dense nor channels-last; 1x1 maps are both layouts at once.
  EXPECT_FALSE(x.as_strided({2, 3, 4, 2}, x.strides(), 0).is_dense());
  Tensor one = Tensor::empty({4, 8, 1, 1});
  EXPECT_TRUE(one.is_contiguous() && one.is_channels_last());
  // A big odd-sized transpose (the tiles do not divide it) both ways.
  Tensor big = uniform({3, 37, 9, 11}, 2);
  Tensor big_cl = big.channels_last();
  EXPECT_EQ(big_cl.contiguous().to_vector(), big.to_vector());
  Tensor back = Tensor::empty(big.shape());
  back.copy_from(big_cl);
  EXPECT_EQ(back.to_vector(), big.to_vector());
}

TEST(ChannelsLast, Conv2dOutputIsChannelsLastAndMatchesNchw) {
  Tensor w = uniform({8, 5, 3, 3}, 3), b = uniform({8}, 4);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  for (bool relu : {false, true}) {
    expect_layouts_agree(
        [&](const Tensor& x) { return conv2d(x, w, b, Conv2dOptions{.stride = 2, .padding = 1}, relu); },
        uniform({3, 5, 9, 9}, 5), true, {w, b});
  }
  Tensor out = conv2d(uniform({2, 3, 8, 8}, 6), w.detach().as_strided({8, 3, 3, 3}, {27, 9, 3, 1}, 0),
                      Tensor(), Conv2dOptions{.padding = 1});
  EXPECT_TRUE(out.is_channels_last()) << "an NCHW input gives a channels-last output";
}

TEST(ChannelsLast, BatchNormMatchesNchw) {
  Tensor w = uniform({16}, 7), b = uniform({16}, 8);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  for (bool relu : {false, true})
    expect_layouts_agree(
        [&](const Tensor& x) { return batch_norm2d(x, w, b, Tensor(), Tensor(), true, {}, relu); },
        uniform({4, 16, 5, 6}, 9), true, {w, b});
}

TEST(ChannelsLast, PoolingMatchesNchw) {
  Tensor x = uniform({3, 20, 8, 8}, 10);
  expect_layouts_agree([](const Tensor& t) { return max_pool2d(t, 2, 2, 0); }, x, true);
  expect_layouts_agree([](const Tensor& t) { return avg_pool2d(t, 3, 2, 1); }, x, true);
  expect_layouts_agree([](const Tensor& t) { return global_avg_pool2d(t); }, x, false);
}

TEST(ChannelsLast, ReluAddShortcutPadMatchNchw) {
  Tensor x = uniform({2, 6, 5, 7}, 11);
  expect_layouts_agree([](const Tensor& t) { return relu(t); }, x, true);
  expect_layouts_agree([](const Tensor& t) { return add(t, relu(t)); }, x, true);
  expect_layouts_agree([](const Tensor& t) { return mul(t, t); }, x, true);
  expect_layouts_agree([](const Tensor& t) { return shortcut_pad(t, 10, 2); }, x, true);
  // Gradients of two layouts meet at x: relu's channels-last one, reshape's NCHW one.
  expect_layouts_agree([](const Tensor& t) { return add(relu(t), reshape(t, t.shape())); }, x, false);
  expect_layouts_agree([](const Tensor& t) { return flatten(t, 1); }, x, false);
}

TEST(ChannelsLast, Resnet20StepMatchesNchwMode) {
  auto model = models::build_model(YAML::Load("{name: resnet20}"), models::ModelSpec{3, 32, 32, 10, 0});
  Tensor x = uniform({8, 3, 32, 32}, 12);
  std::vector<int64_t> labels{0, 1, 2, 3, 4, 5, 6, 7};
  Tensor y = Tensor::from_vector(labels, {8});
  std::vector<float> losses;
  std::vector<std::vector<float>> grads[2];
  for (int mode = 0; mode < 2; ++mode) {
    cpu::onednn::set_channels_last_enabled(mode == 0);
    for (const Tensor& p : model->parameters()) p.set_grad(Tensor());
    Tensor loss = cross_entropy((*model)(x), y);
    losses.push_back(loss.item());
    loss.backward();
    for (const Tensor& p : model->parameters()) grads[mode].push_back(p.grad().to_vector());
  }
  cpu::onednn::set_channels_last_enabled(true);
  EXPECT_NEAR(losses[0], losses[1], 1e-4f * std::fabs(losses[1]));
  for (size_t i = 0; i < grads[0].size(); ++i) expect_near_all(grads[0][i], grads[1][i], 1e-4f, "parameter grad");
}
