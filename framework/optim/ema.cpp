#include "optim/ema.h"

#include <algorithm>

#include "autograd/node.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/elementwise.h"
#include "backend/cuda/optim.h"
#endif

namespace dpt::optim {
namespace {

nn::NamedTensors copy_of(const nn::NamedTensors& state) {
  nn::NamedTensors out;
  for (const auto& [name, t] : state) out.emplace_back(name, t.detach().clone());
  return out;
}

}  // namespace

Ema::Ema(const nn::Module& model, float decay) : decay_(decay), shadow_(copy_of(model.state_dict())) {
  DPT_CHECK(decay >= 0.0f && decay < 1.0f) << "ema: decay must be in [0, 1), got " << decay;
}

void Ema::update(const nn::Module& model) {
  ++updates_;
  float d = std::min(decay_, static_cast<float>(1 + updates_) / static_cast<float>(10 + updates_));
  nn::NamedTensors params = model.named_parameters();
  nn::NamedTensors state = model.state_dict();
  DPT_CHECK(state.size() == shadow_.size()) << "ema: the model's state changed size";
  for (size_t i = 0; i < state.size(); ++i) {
    const Tensor& current = state[i].second;
    const Tensor& avg = shadow_[i].second;
    DPT_CHECK(avg.device() == current.device())
        << "ema: '" << state[i].first << "' is on " << current.device().str() << " but its average on "
        << avg.device().str() << " (make the Ema after moving the model)";
#ifdef DPT_WITH_CUDA
    if (avg.device().is_cuda()) {
      Tensor src = cuda::contiguous(current);
      if (i < params.size())
        cuda::ema_update(avg, src, d);
      else
        avg.copy_from(src);
      continue;
    }
#endif
    Tensor src = current.contiguous();
    const float* c = src.data<float>();
    float* a = avg.data<float>();
    int64_t n = avg.numel();
    if (i < params.size()) {  // state_dict lists the parameters first, then the buffers
#pragma omp parallel for simd schedule(static) if (n > 65536)
      for (int64_t j = 0; j < n; ++j) a[j] = d * a[j] + (1 - d) * c[j];
    } else {
      avg.copy_from(src);
    }
  }
}

Ema::Swap::Swap(Ema& ema, nn::Module& model) : model_(model), saved_(copy_of(model.state_dict())) {
  model.load_state_dict(ema.shadow());
}

Ema::Swap::~Swap() { model_.load_state_dict(saved_); }

}  // namespace dpt::optim
