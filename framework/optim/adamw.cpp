// AdamW's update: plain loops on CPU; on CUDA, one fused multi-tensor kernel per group and
// device (backend/cuda/optim.h) applies the same per-element rule.
#include "optim/adamw.h"

#include <cmath>

#include "optim/state_device.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/optim.h"
#endif

namespace dpt::optim {

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options) : Optimizer(std::move(groups)), options_(options) {
  DPT_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1)
      << "adamw: betas must be in [0, 1), got " << options.beta1 << ", " << options.beta2;
  DPT_CHECK(options.eps > 0) << "adamw: eps must be > 0";
  for (auto& group : groups_)
    for (auto& p : group.params) {
      m_.push_back(Tensor::zeros(p.shape(), DType::f32, p.device()));
      v_.push_back(Tensor::zeros(p.shape(), DType::f32, p.device()));
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
#ifdef DPT_WITH_CUDA
    CudaBatch<cuda::AdamWSlot> batch([&](const std::vector<cuda::AdamWSlot>& slots, int device) {
      cuda::adamw_update(slots, device, lr, decay, b1, b2, eps, c1, c2);
    });
#endif
    for (auto& p : group.params) {
      Tensor& m_state = m_[k];
      Tensor& v_state = v_[k++];
      if (!p.grad().defined()) continue;
      prepare_update("adamw", p, {&m_state, &v_state});
      float* m = m_state.data<float>();
      float* v = v_state.data<float>();
      float* w = p.data<float>();
      const float* g = p.grad().data<float>();
      int64_t n = p.numel();
#ifdef DPT_WITH_CUDA
      if (p.device().is_cuda()) {
        batch.add(p.device().index, {w, g, m, v, n});
        continue;
      }
#endif
#pragma omp parallel for simd schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        w[i] = w[i] * decay - lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
      }
    }
#ifdef DPT_WITH_CUDA
    batch.flush();
#endif
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
