// What the Trainer prints about a model at start: the forward cost of one image.
// (The parameter count is Module::parameter_count.)
#pragma once

#include <cstdint>

#include "models/registry.h"
#include "nn/module.h"

namespace dpt::models {

// Requires: `model` takes [1, spec.in_channels, spec.height, spec.width] f32 CPU input.
// Ensures: the multiply-accumulates of one forward of one image, counted by conv2d and
// linear (ops/mac_count.h: convolutions and fully connected layers; BN, pooling,
// activations and the residual sums are not counted). Runs that forward in eval mode
// under NoGrad, so running statistics and gradients are untouched; the model's
// train/eval mode is restored before returning.
int64_t macs_per_image(nn::Module& model, const ModelSpec& spec);

}  // namespace dpt::models
