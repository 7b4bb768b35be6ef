// A fill kernel of test_cuda_device's own (cuda_fill.cu), compiled into that test only in
// CUDA builds: it poisons device memory and queues work on a stream, so the device layer
// is tested without ops/ and the library carries no kernel that only a test uses.
#pragma once

#include <cstdint>

namespace dpt::testing {

// Fills n floats at `data` on `device` with `value`, on the device's compute stream.
// Queued, not waited for.
void cuda_fill(float* data, int64_t n, float value, int device);

}  // namespace dpt::testing
