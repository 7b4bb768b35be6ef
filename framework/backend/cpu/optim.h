// The optimizers' per-element updates on the CPU, the twins of backend/cuda/optim.h (which
// states the contracts): plain loops, parallel over a parameter's elements. The
// *_on_device values are host memory here, read when the update runs.
#pragma once

#include <vector>

#include "backend/kernels.h"

namespace dpt::cpu {

void sgd_update(const std::vector<SgdSlot>& slots, int device, float lr, float weight_decay, float momentum,
                bool nesterov, const float* lr_on_device);
void adamw_update(const std::vector<AdamWSlot>& slots, int device, float lr, float decay, float beta1,
                  float beta2, float eps, float c1, float c2, const float* scalars_on_device);
void ema_update(const Tensor& average, const Tensor& current, float decay, const float* decay_on_device);
void flag_nonfinite(const std::vector<FiniteSlot>& slots, int device, float* flag);

}  // namespace dpt::cpu
