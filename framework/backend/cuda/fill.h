// Fills device memory with one value, on the device's compute stream. The smallest
// kernel in the backend, kept so that nvcc and kernel launches are exercised by every
// CUDA build; cudaMemsetAsync covers zeros.
#pragma once

#include <cstdint>

namespace dpt::cuda {

// Requires `data` to hold n floats on `device`. Queued, not waited for.
void fill(float* data, int64_t n, float value, int device);

}  // namespace dpt::cuda
