#include "optim/sgd.h"

namespace dpt::optim {

Sgd::Sgd(std::vector<ParamGroup> groups, SgdOptions options) : Optimizer(std::move(groups)), options_(options) {
  DPT_CHECK(options.momentum >= 0.0f && options.momentum < 1.0f)
      << "sgd: momentum must be in [0, 1), got " << options.momentum;
  DPT_CHECK(!options.nesterov || options.momentum > 0.0f) << "sgd: nesterov needs momentum > 0";
  for (auto& group : groups_)
    for (auto& p : group.params) velocity_.push_back(Tensor::zeros(p.shape()));
}

void Sgd::step(float lr) {
  size_t k = 0;
  const float mu = options_.momentum;
  for (auto& group : groups_) {
    const float wd = group.weight_decay;
    for (auto& p : group.params) {
      Tensor& v = velocity_[k++];
      if (!p.grad().defined()) continue;
      float* w = p.data<float>();
      const float* g = p.grad().data<float>();
      float* vel = v.data<float>();
      int64_t n = p.numel();
      if (mu == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + wd * w[i]);
      } else if (options_.nesterov) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) {
          float gi = g[i] + wd * w[i];
          vel[i] = mu * vel[i] + gi;
          w[i] -= lr * (gi + mu * vel[i]);
        }
      } else {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) {
          vel[i] = mu * vel[i] + g[i] + wd * w[i];
          w[i] -= lr * vel[i];
        }
      }
    }
  }
}

std::vector<Optimizer::StateTensor> Sgd::state_tensors() const {
  std::vector<StateTensor> out;
  if (options_.momentum == 0.0f) return out;  // plain SGD keeps no state
  size_t k = 0;
  for (const auto& group : groups_)
    for (const auto& p : group.params) out.push_back({"momentum", p, velocity_[k++]});
  return out;
}

}  // namespace dpt::optim
