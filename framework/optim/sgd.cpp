// SGD's update: one fused multi-tensor update per group and device (the device's kernel
// table: plain loops on the CPU, backend/cuda/optim.cu on CUDA).
#include "optim/sgd.h"

#include "backend/kernels.h"
#include "optim/device_scalars.h"

namespace dpt::optim {

Sgd::Sgd(std::vector<ParamGroup> groups, SgdOptions options) : Optimizer(std::move(groups)), options_(options) {
  DPT_CHECK(options.momentum >= 0.0f && options.momentum < 1.0f)
      << "sgd: momentum must be in [0, 1), got " << options.momentum;
  DPT_CHECK(!options.nesterov || options.momentum > 0.0f) << "sgd: nesterov needs momentum > 0";
  state_make(1);  // velocity
}

void Sgd::step(float lr) { update(lr, nullptr); }

void Sgd::step_prepare(float lr) {
  DeviceScalars& scalars = device_scalars(1);
  scalars.set(0, lr);
  scalars.upload();
}

void Sgd::step_apply() { update(0.0f, &prepared_scalars("sgd")); }

void Sgd::update(float lr, const DeviceScalars* scalars) {
  const float* lr_on_device = scalars ? scalars->device_ptr(0) : nullptr;
  size_t k = 0;
  for (auto& group : groups_) {
    const float wd = group.weight_decay;
    SlotBatch<SgdSlot> batch([&](const std::vector<SgdSlot>& slots, Device device) {
      kernels_for(device).sgd_update(slots, device.index, lr, wd, options_.momentum, options_.nesterov,
                                     lr_on_device);
    });
    for (auto& p : group.params) {
      Tensor& v = state_[0][k++];
      if (!p.grad().defined()) continue;
      prepare_update("sgd", p, {&v}, scalars);
      batch.add(p.device(), {p.data<float>(), p.grad().data<float>(), v.data<float>(), p.numel()});
    }
    batch.flush();
  }
}

std::vector<std::string> Sgd::state_kinds() const {
  if (options_.momentum == 0.0f) return {};  // plain SGD keeps no state
  return {"momentum"};
}

}  // namespace dpt::optim
