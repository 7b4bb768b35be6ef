// Kernels of the CUDA tests' own (cuda_fill.cu), compiled into them only in CUDA builds:
// one poisons device memory and queues work on a stream, so the device layer is tested
// without ops/; one keeps the device busy, so a collective queued behind it cannot finish
// in time. The library carries no kernel that only a test uses.
#pragma once

#include <cstdint>

namespace dpt::testing {

// Fills n floats at `data` on `device` with `value`, on the device's compute stream.
// Queued, not waited for.
void cuda_fill(float* data, int64_t n, float value, int device);
// One thread that spins for `seconds` on the device's compute stream. Queued, not waited for.
void cuda_spin(double seconds, int device);

}  // namespace dpt::testing
