// The training and test sets a config names, loaded (or made) and checked to fit one
// model, so that the run finds a bad path or a mismatched test set before it builds anything.
#pragma once

#include <cstdint>

#include "datasets/dataset.h"
#include "io/config.h"

namespace dpt::train {

struct TrainData {
  data::Dataset train, test;
};

// MNIST, Fashion-MNIST or CIFAR-10 from `config.path`, or synthetic data from `seed` (a
// held-out set one sixth the size of the training set, as MNIST's 10k/60k). Throws
// dpt::Error naming the dataset and the path for missing or malformed files, and when the
// test set differs from the training set in channels, image size or classes.
TrainData load_data(const io::DatasetConfig& config, uint64_t seed);

}  // namespace dpt::train
