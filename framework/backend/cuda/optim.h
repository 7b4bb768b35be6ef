// Fused optimizer updates on CUDA: one kernel launch updates many parameters (up to
// kMaxTensorsPerLaunch at a time), with exactly the per-element rules of framework/optim's
// CPU loops, so a step costs a few launches instead of one or more per parameter.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace dpt::cuda {

// One parameter's buffers, all contiguous f32 of n elements on the launch's device.
struct SgdSlot {
  float* weight;
  const float* grad;
  float* velocity;  // unused when momentum == 0
  int64_t n;
};

struct AdamWSlot {
  float* weight;
  const float* grad;
  float* m;
  float* v;
  int64_t n;
};

// PyTorch's SGD, as optim/sgd.cpp: g = grad + wd w; v = momentum v + g;
// w -= lr (nesterov ? g + momentum v : v); without momentum w -= lr g.
void sgd_update(const std::vector<SgdSlot>& slots, int device, float lr, float weight_decay, float momentum,
                bool nesterov);

// AdamW, as optim/adamw.cpp: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// w = w decay - lr (m / c1) / (sqrt(v / c2) + eps), with decay = 1 - lr wd and the bias
// corrections c1 = 1 - b1^t, c2 = 1 - b2^t computed by the caller.
void adamw_update(const std::vector<AdamWSlot>& slots, int device, float lr, float decay, float beta1,
                  float beta2, float eps, float c1, float c2);

// Requires: average and current contiguous f32 of one shape on one device.
// Ensures: average = decay average + (1 - decay) current (optim/ema.cpp's rule).
void ema_update(const Tensor& average, const Tensor& current, float decay);

}  // namespace dpt::cuda
