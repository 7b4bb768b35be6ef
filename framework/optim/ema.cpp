#include "optim/ema.h"

#include <algorithm>

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/device_check.h"

namespace dpt::optim {
namespace {

nn::NamedTensors copy_of(const nn::NamedTensors& state) {
  nn::NamedTensors out;
  for (const auto& [name, t] : state) out.emplace_back(name, t.detach().clone());
  return out;
}

// The warm-up decay, in one place for update() and update_prepare().
float warmup_decay(float decay, int64_t updates) {
  return std::min(decay, static_cast<float>(1 + updates) / static_cast<float>(10 + updates));
}

}  // namespace

Ema::Ema(const nn::Module& model, float decay) : decay_(decay), shadow_(copy_of(model.state_dict())) {
  DPT_CHECK(decay >= 0.0f && decay < 1.0f) << "ema: decay must be in [0, 1), got " << decay;
}

void Ema::update(const nn::Module& model) {
  ++updates_;
  apply(model, warmup_decay(decay_, updates_), nullptr);
}

void Ema::update_prepare() {
  DPT_CHECK(!shadow_.empty()) << "ema: the model has no state to average";
  if (!device_decay_) device_decay_ = std::make_unique<DeviceScalars>(1, shadow_.front().second.device());
  ++updates_;
  device_decay_->set(0, warmup_decay(decay_, updates_));
  device_decay_->upload();
}

void Ema::update_apply(const nn::Module& model) {
  DPT_CHECK(device_decay_) << "ema: update_apply() before any update_prepare()";
  apply(model, 0.0f, device_decay_->device_ptr(0));
}

void Ema::apply(const nn::Module& model, float d, const float* decay_on_device) {
  nn::NamedTensors params = model.named_parameters();
  nn::NamedTensors state = model.state_dict();
  DPT_CHECK(state.size() == shadow_.size()) << "ema: the model's state changed size";
  for (size_t i = 0; i < state.size(); ++i) {
    const Tensor& current = state[i].second;
    const Tensor& avg = shadow_[i].second;
    DPT_CHECK(avg.device() == current.device())
        << "ema: '" << state[i].first << "' is on " << current.device().str() << " but its average on "
        << avg.device().str() << " (make the Ema after moving the model)";
    DPT_CHECK(!decay_on_device || avg.device() == device_decay_->device())
        << "ema: update_apply's decay is on " << device_decay_->device().str() << ", but '" << state[i].first
        << "' is on " << avg.device().str();
    Tensor src = contiguous_on_device(current);
    if (i < params.size())  // state_dict lists the parameters first, then the buffers
      kernels_for(avg.device()).ema_update(avg, src, d, decay_on_device);
    else
      avg.copy_from(src);
  }
}

Ema::Swap::Swap(Ema& ema, nn::Module& model) : model_(model), saved_(copy_of(model.state_dict())) {
  model.load_state_dict(ema.shadow());
}

Ema::Swap::~Swap() { model_.load_state_dict(saved_); }

}  // namespace dpt::optim
