// AdamW's update: one fused multi-tensor update per group and device (the device's kernel
// table: plain loops on the CPU, backend/cuda/optim.cu on CUDA).
#include "optim/adamw.h"

#include <cmath>

#include "backend/kernels.h"
#include "optim/device_scalars.h"

namespace dpt::optim {

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options) : Optimizer(std::move(groups)), options_(options) {
  DPT_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1)
      << "adamw: betas must be in [0, 1), got " << options.beta1 << ", " << options.beta2;
  DPT_CHECK(options.eps > 0) << "adamw: eps must be > 0";
  state_make(2);  // exp_avg, exp_avg_sq
}

namespace {

// The step's values, computed here alone for step() and step_prepare(), so that eager and
// graphed updates get the same bits.
float bias_correction(float beta, int64_t steps) { return 1.0f - static_cast<float>(std::pow(beta, steps)); }
float decay_of(float lr, float weight_decay) { return 1.0f - lr * weight_decay; }

}  // namespace

void AdamW::step(float lr) {
  ++steps_;
  update(lr, nullptr);
}

// Per group four values: lr, decay, c1, c2 (the layout adamw_update reads).
void AdamW::step_prepare(float lr) {
  DeviceScalars& scalars = device_scalars(4 * groups_.size());
  ++steps_;
  const float c1 = bias_correction(options_.beta1, steps_), c2 = bias_correction(options_.beta2, steps_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    scalars.set(4 * g, lr);
    scalars.set(4 * g + 1, decay_of(lr, groups_[g].weight_decay));
    scalars.set(4 * g + 2, c1);
    scalars.set(4 * g + 3, c2);
  }
  scalars.upload();
}

void AdamW::step_apply() { update(0.0f, &prepared_scalars("adamw")); }

void AdamW::update(float lr, const DeviceScalars* scalars) {
  const float b1 = options_.beta1, b2 = options_.beta2, eps = options_.eps;
  const float c1 = bias_correction(b1, steps_), c2 = bias_correction(b2, steps_);
  size_t k = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    auto& group = groups_[gi];
    const float decay = decay_of(lr, group.weight_decay);
    const float* on_device = scalars ? scalars->device_ptr(4 * gi) : nullptr;
    SlotBatch<AdamWSlot> batch([&](const std::vector<AdamWSlot>& slots, Device device) {
      kernels_for(device).adamw_update(slots, device.index, lr, decay, b1, b2, eps, c1, c2, on_device);
    });
    for (auto& p : group.params) {
      Tensor& m = state_[0][k];
      Tensor& v = state_[1][k++];
      if (!p.grad().defined()) continue;
      prepare_update("adamw", p, {&m, &v}, scalars);
      batch.add(p.device(),
                {p.data<float>(), p.grad().data<float>(), m.data<float>(), v.data<float>(), p.numel()});
    }
    batch.flush();
  }
}

}  // namespace dpt::optim
