// MNIST and Fashion-MNIST: the same four IDX files in a directory, the same 28x28 grey
// images and 10 classes; they differ only in normalisation and in how to get the data.
#pragma once

#include <string>

#include "datasets/dataset.h"

namespace dpt::data {

// Reads {train,t10k}-images-idx3-ubyte and {train,t10k}-labels-idx1-ubyte from `dir`,
// each preferring the .gz file when both exist. `hint` says how to get the data and is
// appended to the error when the directory or a file is missing.
// Ensures: dataset_check passes; image and label counts agree (else dpt::Error).
Dataset load_mnist_dir(const std::string& dir, bool train, const Normalization& normalization,
                       const std::string& hint);

// load_mnist_dir with each dataset's normalisation and hint.
Dataset load_mnist(const std::string& dir, bool train);
Dataset load_fashion_mnist(const std::string& dir, bool train);

}  // namespace dpt::data
