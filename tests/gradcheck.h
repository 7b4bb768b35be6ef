// Finite-difference gradient check shared by the op tests.
//
// Loss L = sum(w * f(inputs)) with fixed random weights w, accumulated in double. For each
// checked element x_i of each input that requires grad, the analytic dL/dx_i from
// backward() must match (L(x_i + eps) - L(x_i - eps)) / (2 eps) within atol + rtol * |ref|.
// Kernels are f32, so eps is large (1e-2) and inputs must keep 2*eps away from kinks
// (ReLU at 0, max-pool ties): the caller builds such inputs. Inputs are CPU tensors; with
// options.device a CUDA device, every evaluation runs on device copies of them (leaves of
// their own), so the same check covers the CUDA kernels.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <vector>

#include "autograd/node.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace dpt::testing {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradCheckOptions {
  double eps = 1e-2;
  double atol = 2e-3;
  double rtol = 2e-2;
  int max_elements = 48;  // per input, chosen at random
  Device device = Device::cpu();
};

inline Tensor random_tensor(const Shape& shape, uint64_t seed, float low = -1.0f, float high = 1.0f) {
  Tensor t = Tensor::empty(shape);
  Rng(seed).fill_uniform(t, low, high);
  return t;
}

inline double weighted_sum(const Tensor& out, const std::vector<float>& w) {
  std::vector<float> v = out.to_vector();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * w[i];
  return s;
}

// The inputs themselves on the CPU; elsewhere, copies on opt.device that require grad
// where the input does.
inline std::vector<Tensor> placed(const std::vector<Tensor>& inputs, const GradCheckOptions& opt) {
  if (opt.device.is_cpu()) return inputs;
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) {
    Tensor copy = t.detach().to(opt.device);
    if (t.requires_grad()) copy.set_requires_grad(true);
    out.push_back(copy);
  }
  return out;
}

inline void expect_gradients_match(const OpFn& f, std::vector<Tensor> inputs, GradCheckOptions opt = {}) {
  // Analytic gradients.
  std::vector<Tensor> leaves = placed(inputs, opt);
  for (Tensor& t : leaves) t.set_grad(Tensor());
  Tensor out = f(leaves);
  ASSERT_TRUE(out.device() == opt.device)
      << "the op ran on " << out.device().str() << ", not " << opt.device.str();
  std::vector<float> w(out.numel());
  std::mt19937 gen(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : w) x = dist(gen);
  out.backward(Tensor::from_vector(w, out.shape()).to(opt.device));

  autograd::NoGrad no_grad;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    ASSERT_TRUE(leaves[k].grad().defined()) << "input " << k << " got no gradient";
    std::vector<float> analytic = leaves[k].grad().to_vector();
    float* p = x.data<float>();
    std::vector<int64_t> picks;
    for (int64_t i = 0; i < x.numel(); ++i) picks.push_back(i);
    std::shuffle(picks.begin(), picks.end(), gen);
    if (static_cast<int>(picks.size()) > opt.max_elements) picks.resize(opt.max_elements);
    for (int64_t i : picks) {
      float saved = p[i];
      p[i] = saved + static_cast<float>(opt.eps);
      double up = weighted_sum(f(placed(inputs, opt)), w);
      p[i] = saved - static_cast<float>(opt.eps);
      double down = weighted_sum(f(placed(inputs, opt)), w);
      p[i] = saved;
      double numeric = (up - down) / (2 * opt.eps);
      EXPECT_NEAR(analytic[i], numeric, opt.atol + opt.rtol * std::abs(numeric))
          << "input " << k << " element " << i;
    }
  }
}

}  // namespace dpt::testing
