// The one thing the ops that span ranks (synchronised batch norm, the tensor-parallel
// regions) need from the distributed layer: a way to sum a tensor across ranks. A
// function, so the ops stay free of process groups; the caller binds one.
#pragma once

#include <functional>

#include "core/tensor.h"

namespace dpt {

// Sums a contiguous tensor (f32; bf16 where the group carries it, as NCCL does) over all
// ranks, in place: on the CPU before returning; on CUDA (the tensor is on the op's device)
// before any work queued on the device's compute stream after the call (a process group's
// wait() on an NCCL collective does that).
using SumAcrossRanks = std::function<void(const Tensor&)>;

}  // namespace dpt
