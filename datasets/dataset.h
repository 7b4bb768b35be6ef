// The in-memory dataset every loader reads from: u8 pixels (a quarter of the memory of
// f32), labels, the image geometry and the per-channel normalisation applied when a
// batch is built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dpt::data {

// x -> (x / 255 - mean[c]) / std[c], per channel c.
struct Normalization {
  std::vector<float> mean;
  std::vector<float> std;
};

Normalization normalization_mnist();          // mean 0.1307, std 0.3081
Normalization normalization_fashion_mnist();  // mean 0.2860, std 0.3530

struct Dataset {
  std::vector<uint8_t> images;  // size() samples of channels x height x width, CHW, sample after sample
  std::vector<int64_t> labels;  // each in [0, classes)
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t classes = 0;
  Normalization normalization;  // one mean and std per channel

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t sample_numel() const { return channels * height * width; }
};

// Throws dpt::Error unless the fields agree: geometry and classes > 0, images.size() ==
// size() * sample_numel(), labels in range, one mean and one std > 0 per channel.
void dataset_check(const Dataset& dataset);

// Throws dpt::Error unless `test` has the channels, image size and classes of `train`, so
// that a model built for the training set also takes the test set; `name` names the data
// in the message ("mnist in data/mnist").
void dataset_check_split(const Dataset& train, const Dataset& test, const std::string& name);

// Writes sample `index` as sample_numel() normalised floats to `out` (CHW).
// Requires: dataset_check(dataset) passes and 0 <= index < size().
void dataset_sample_to_float(const Dataset& dataset, int64_t index, float* out);

}  // namespace dpt::data
