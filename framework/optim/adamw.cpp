#include "optim/adamw.h"

#include <cmath>

namespace dpt::optim {

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options) : Optimizer(std::move(groups)), options_(options) {
  DPT_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1)
      << "adamw: betas must be in [0, 1), got " << options.beta1 << ", " << options.beta2;
  DPT_CHECK(options.eps > 0) << "adamw: eps must be > 0";
  for (auto& group : groups_)
    for (auto& p : group.params) {
      m_.push_back(Tensor::zeros(p.shape()));
      v_.push_back(Tensor::zeros(p.shape()));
    }
}

void AdamW::step(float lr) {
  ++steps_;
  const float b1 = options_.beta1, b2 = options_.beta2, eps = options_.eps;
  const float c1 = 1.0f - static_cast<float>(std::pow(b1, steps_));
  const float c2 = 1.0f - static_cast<float>(std::pow(b2, steps_));
  size_t k = 0;
  for (auto& group : groups_) {
    const float decay = 1.0f - lr * group.weight_decay;
    for (auto& p : group.params) {
      float* m = m_[k].data<float>();
      float* v = v_[k++].data<float>();
      if (!p.grad().defined()) continue;
      float* w = p.data<float>();
      const float* g = p.grad().data<float>();
      int64_t n = p.numel();
#pragma omp parallel for simd schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        w[i] = w[i] * decay - lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
      }
    }
  }
}

std::vector<Optimizer::StateTensor> AdamW::state_tensors() const {
  std::vector<StateTensor> out;
  size_t k = 0;
  for (const auto& group : groups_)
    for (const auto& p : group.params) {
      out.push_back({"exp_avg", p, m_[k]});
      out.push_back({"exp_avg_sq", p, v_[k++]});
    }
  return out;
}

}  // namespace dpt::optim
