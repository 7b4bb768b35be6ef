// The training loop's per-step question "are the gradients (and the loss) all finite?"
// on CUDA: every tensor is scanned on the device into one flag, and only that flag comes
// back, so the check costs a few launches and one 4-byte read-back rather than copying
// every gradient to the host.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace dpt::cuda {

// Requires: every tensor contiguous f32 on cuda:`device` (undefined ones are skipped).
// Ensures: true when no element is NaN or Inf. Waits for the GPU (the flag's read-back).
bool all_finite(const std::vector<Tensor>& tensors, int device);

}  // namespace dpt::cuda
