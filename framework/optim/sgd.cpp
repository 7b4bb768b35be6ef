// SGD's update: plain loops on CPU; on CUDA, one fused multi-tensor kernel per group and
// device (backend/cuda/optim.h) applies the same per-element rule.
#include "optim/sgd.h"

#include "optim/device_scalars.h"
#include "optim/state_device.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/optim.h"
#endif

namespace dpt::optim {

Sgd::Sgd(std::vector<ParamGroup> groups, SgdOptions options) : Optimizer(std::move(groups)), options_(options) {
  DPT_CHECK(options.momentum >= 0.0f && options.momentum < 1.0f)
      << "sgd: momentum must be in [0, 1), got " << options.momentum;
  DPT_CHECK(!options.nesterov || options.momentum > 0.0f) << "sgd: nesterov needs momentum > 0";
  for (auto& group : groups_)
    for (auto& p : group.params) velocity_.push_back(Tensor::zeros(p.shape(), DType::f32, p.device()));
}

void Sgd::step(float lr) { update(lr, nullptr); }

void Sgd::step_prepare(float lr) {
  DeviceScalars& scalars = device_scalars(1, "sgd");
  scalars.set(0, lr);
  scalars.upload();
}

void Sgd::step_apply() { update(0.0f, prepared_scalars("sgd").device_ptr(0)); }

void Sgd::update(float lr, const float* lr_on_device) {
  size_t k = 0;
  const float mu = options_.momentum;
  for (auto& group : groups_) {
    const float wd = group.weight_decay;
#ifdef DPT_WITH_CUDA
    CudaBatch<cuda::SgdSlot> batch([&](const std::vector<cuda::SgdSlot>& slots, int device) {
      cuda::sgd_update(slots, device, lr, wd, mu, options_.nesterov, lr_on_device);
    });
#endif
    for (auto& p : group.params) {
      Tensor& v = velocity_[k++];
      if (!p.grad().defined()) continue;
      prepare_update("sgd", p, {&v}, lr_on_device != nullptr);
#ifdef DPT_WITH_CUDA
      if (p.device().is_cuda()) {
        batch.add(p.device().index, {p.data<float>(), p.grad().data<float>(), v.data<float>(), p.numel()});
        continue;
      }
#endif
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
#ifdef DPT_WITH_CUDA
    batch.flush();
#endif
  }
}

std::vector<std::string> Sgd::state_kinds() const {
  if (options_.momentum == 0.0f) return {};  // plain SGD keeps no state
  return {"momentum"};
}

std::vector<Optimizer::StateTensor> Sgd::state_tensors() const {
  std::vector<StateTensor> out;
  if (state_kinds().empty()) return out;
  size_t k = 0;
  for (const auto& group : groups_)
    for (const auto& p : group.params) out.push_back({"momentum", p, velocity_[k++]});
  return out;
}

}  // namespace dpt::optim
