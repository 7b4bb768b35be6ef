// Random images and labels of any shape, for throughput runs that must not wait on disk
// or depend on which data a machine has.
#pragma once

#include <cstdint>

#include "datasets/dataset.h"

namespace dpt::data {

// `size` samples of channels x height x width uniform random bytes with labels uniform
// in [0, classes). Ensures: the same arguments give the same data on every platform;
// normalisation is the uniform distribution's (mean 0.5, std 0.2898 per channel).
// Throws dpt::Error, before allocating, when an argument is not positive or the data would
// not fit in this machine's memory.
Dataset make_synthetic(int64_t channels, int64_t height, int64_t width, int64_t classes, int64_t size,
                       uint64_t seed);

}  // namespace dpt::data
