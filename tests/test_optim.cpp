// Optimizers and schedules against the update rules written out by hand in double.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "error_of.h"

#include "optim/adamw.h"
#include "optim/ema.h"
#include "optim/schedule.h"
#include "optim/sgd.h"

using namespace dpt;
using namespace dpt::optim;

namespace {

Tensor param(std::vector<float> v) {
  Tensor p = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  p.set_requires_grad(true);
  return p;
}

void set_grad(const Tensor& p, std::vector<float> g) { p.set_grad(Tensor::from_vector(g, p.shape())); }

}  // namespace

TEST(Sgd, MomentumNesterovWeightDecayMatchReference) {
  for (bool nesterov : {false, true}) {
    Tensor p = param({1.0f, -2.0f, 0.5f});
    Sgd sgd({{{p}, 0.1f}}, {0.9f, nesterov});
    std::vector<double> w = {1.0, -2.0, 0.5}, v(3, 0.0);
    for (int step = 0; step < 4; ++step) {
      std::vector<float> g = {0.3f * step - 0.2f, 0.1f, -0.4f + 0.05f * step};
      set_grad(p, g);
      sgd.step(0.05f);
      for (int i = 0; i < 3; ++i) {
        double gi = g[i] + 0.1 * w[i];
        v[i] = 0.9 * v[i] + gi;
        w[i] -= 0.05 * (nesterov ? gi + 0.9 * v[i] : v[i]);
      }
    }
    std::vector<float> got = p.to_vector();
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], w[i], 1e-6) << "nesterov " << nesterov;
  }
}

TEST(Sgd, ParameterWithoutGradientIsLeftAlone) {
  Tensor a = param({1.0f}), b = param({2.0f});
  Sgd sgd({{{a, b}, 0.0f}}, {});
  set_grad(a, {1.0f});
  sgd.step(0.5f);
  EXPECT_FLOAT_EQ(a.item(), 0.5f);
  EXPECT_FLOAT_EQ(b.item(), 2.0f);
  EXPECT_THROW(Sgd({{{a}, 0.0f}}, {1.5f, false}), Error);
}

TEST(AdamW, MatchesReferenceWithDecoupledDecay) {
  Tensor p = param({0.5f, -1.0f});
  AdamW adam({{{p}, 0.01f}}, {0.9f, 0.999f, 1e-8f});
  std::vector<double> w = {0.5, -1.0}, m(2, 0.0), v(2, 0.0);
  for (int t = 1; t <= 5; ++t) {
    std::vector<float> g = {0.1f * t, -0.3f};
    set_grad(p, g);
    adam.step(0.01f);
    for (int i = 0; i < 2; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
      w[i] = w[i] * (1 - 0.01 * 0.01) - 0.01 * mh / (std::sqrt(vh) + 1e-8);
    }
  }
  std::vector<float> got = p.to_vector();
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(got[i], w[i], 1e-6);
}

TEST(Schedule, WarmupCosineMultistepConstant) {
  ScheduleOptions cosine{ScheduleKind::cosine, 1, {}, 0.1f, 0.0f};
  LrSchedule s(1.0f, cosine, 10, 5);  // 10 warmup steps, then 40 cosine steps
  EXPECT_NEAR(s.lr_at(0), 0.1, 1e-6);
  EXPECT_NEAR(s.lr_at(9), 1.0, 1e-6);
  EXPECT_NEAR(s.lr_at(10), 1.0, 1e-6);
  EXPECT_NEAR(s.lr_at(30), 0.5 * (1 + std::cos(std::numbers::pi * 20 / 40)), 1e-6);
  EXPECT_NEAR(s.lr_at(50), 0.0, 1e-6);
  LrSchedule m(0.5f, {ScheduleKind::multistep, 0, {2, 4}, 0.1f, 0.0f}, 10, 6);
  EXPECT_NEAR(m.lr_at(19), 0.5, 1e-7);
  EXPECT_NEAR(m.lr_at(20), 0.05, 1e-7);
  EXPECT_NEAR(m.lr_at(45), 0.005, 1e-7);
  LrSchedule c(0.3f, {}, 10, 2);
  EXPECT_FLOAT_EQ(c.lr_at(17), 0.3f);
}

TEST(Ema, AveragesParametersCopiesBuffersAndSwaps) {
  struct Tiny : nn::Module {
    Tensor w, running;
    Tiny() {
      w = register_parameter("w", Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, {2}));
      running = register_buffer("running", Tensor::from_vector(std::vector<float>{5.0f}, {1}));
    }
    Tensor forward(const Tensor& x) override { return x; }
  };
  Tiny model;
  Ema ema(model, 0.5f);
  std::vector<double> shadow = {1.0, 2.0};
  for (int step = 1; step <= 3; ++step) {
    model.w.data<float>()[0] += 1.0f;  // what an optimizer step would do
    model.running.data<float>()[0] = 10.0f * step;
    if (step == 2) {  // the split update of a CUDA graph step, here with the decay in host memory
      ema.update_prepare();
      ema.update_apply(model);
    } else {
      ema.update(model);
    }
    double d = std::min(0.5, (1.0 + step) / (10.0 + step));
    shadow[0] = d * shadow[0] + (1 - d) * model.w.to_vector()[0];
    shadow[1] = d * shadow[1] + (1 - d) * model.w.to_vector()[1];
  }
  {
    Ema::Swap swap(ema, model);
    EXPECT_NEAR(model.w.to_vector()[0], shadow[0], 1e-6);
    EXPECT_NEAR(model.w.to_vector()[1], shadow[1], 1e-6);
    EXPECT_FLOAT_EQ(model.running.item(), 30.0f);
  }
  EXPECT_FLOAT_EQ(model.w.to_vector()[0], 4.0f);  // the trained weights are back
  EXPECT_THROW(Ema(model, 1.0f), Error);
}

// The CUDA-graph halves of a step (step_prepare uploads the step's values, step_apply
// reads them as its kernels run) run on the CPU too, where the values live in host memory:
// there they give the bits step(lr) gives. step_apply before any step_prepare is an error.
TEST(GraphedStep, PreparedStepsEqualEagerSteps) {
  using dpt::testing::error_of;
  const std::vector<std::vector<float>> grads = {{0.5f, -0.25f}, {1.0f, 2.0f}, {-0.75f, 0.125f}};
  Tensor eager_sgd = param({1.0f, 2.0f}), split_sgd = param({1.0f, 2.0f});
  Tensor eager_adamw = param({1.0f, 2.0f}), split_adamw = param({1.0f, 2.0f});
  Sgd sgd_eager({{{eager_sgd}, 0.01f}}, {0.9f, true}), sgd_split({{{split_sgd}, 0.01f}}, {0.9f, true});
  AdamW adamw_eager({{{eager_adamw}, 0.1f}}, {}), adamw_split({{{split_adamw}, 0.1f}}, {});
  EXPECT_NE(error_of([&] { sgd_split.step_apply(); }).find("sgd: step_apply() before any step_prepare(lr)"),
            std::string::npos);
  for (size_t step = 0; step < grads.size(); ++step) {
    const float lr = 0.1f / static_cast<float>(step + 1);
    for (const Tensor& p : {eager_sgd, split_sgd, eager_adamw, split_adamw}) set_grad(p, grads[step]);
    sgd_eager.step(lr);
    sgd_split.step_prepare(lr);
    sgd_split.step_apply();
    adamw_eager.step(lr);
    adamw_split.step_prepare(lr);
    adamw_split.step_apply();
    EXPECT_EQ(split_sgd.to_vector(), eager_sgd.to_vector()) << "sgd, step " << step;
    EXPECT_EQ(split_adamw.to_vector(), eager_adamw.to_vector()) << "adamw, step " << step;
  }
  EXPECT_NE(eager_sgd.to_vector(), (std::vector<float>{1.0f, 2.0f}));  // the steps did move them
}
