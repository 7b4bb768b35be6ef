// Fused optimizer updates on CUDA: one kernel launch updates many parameters (up to
// kMaxTensorsPerLaunch at a time), with exactly the per-element rules of framework/optim's
// CPU loops, so a step costs a few launches instead of one or more per parameter.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::cuda {

// PyTorch's SGD, as optim/sgd.cpp: g = grad + wd w; v = momentum v + g;
// w -= lr (nesterov ? g + momentum v : v); without momentum w -= lr g.
// `lr_on_device` (CUDA graphs): when not null the kernels read the learning rate from
// there as they run, and `lr` is not used, so a captured update follows the schedule.
void sgd_update(const std::vector<SgdSlot>& slots, int device, float lr, float weight_decay, float momentum,
                bool nesterov, const float* lr_on_device = nullptr);

// AdamW, as optim/adamw.cpp: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// w = w decay - lr (m / c1) / (sqrt(v / c2) + eps), with decay = 1 - lr wd and the bias
// corrections c1 = 1 - b1^t, c2 = 1 - b2^t computed by the caller.
// `scalars_on_device` (CUDA graphs): when not null the kernels read {lr, decay, c1, c2}
// from there as they run instead of the by-value ones.
void adamw_update(const std::vector<AdamWSlot>& slots, int device, float lr, float decay, float beta1,
                  float beta2, float eps, float c1, float c2, const float* scalars_on_device = nullptr);

// Sets *flag (one f32 in device memory on `device`) to 1 when any element of the slots is
// NaN or Inf, and leaves it as it was otherwise (the caller zeroes it first): the
// non-finite gradient check of a graphed step, which must not read gradients back.
void flag_nonfinite(const std::vector<FiniteSlot>& slots, int device, float* flag);

// Requires: average and current contiguous f32 of one shape on one device.
// Ensures: average = decay average + (1 - decay) current (optim/ema.cpp's rule), with
// decay read from `decay_on_device` as the kernel runs when that is not null (CUDA graphs).
void ema_update(const Tensor& average, const Tensor& current, float decay, const float* decay_on_device = nullptr);

}  // namespace dpt::cuda
