// The one thing the ops that span ranks (synchronised batch norm, the tensor-parallel
// regions) need from the distributed layer: a way to sum a tensor across ranks. A
// function, so the ops stay free of process groups; the caller binds one.
#pragma once

#include <functional>

#include "core/tensor.h"

namespace dpt {

// Sums a contiguous tensor over all ranks in place: on the CPU before returning; on CUDA
// before any work queued on the compute stream after the call.
using SumAcrossRanks = std::function<void(const Tensor&)>;

}  // namespace dpt
