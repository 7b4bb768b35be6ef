// Dataset invariants and the u8 -> normalised f32 conversion used when building batches.
#include "datasets/dataset.h"

#include "core/error.h"

namespace dpt::data {

Normalization normalization_mnist() { return {{0.1307f}, {0.3081f}}; }
Normalization normalization_fashion_mnist() { return {{0.2860f}, {0.3530f}}; }

void dataset_check(const Dataset& d) {
  DPT_CHECK(d.channels > 0 && d.height > 0 && d.width > 0)
      << "dataset: image shape must be positive, got [" << d.channels << ", " << d.height << ", " << d.width
      << "]";
  DPT_CHECK(d.classes > 0) << "dataset: classes must be > 0, got " << d.classes;
  DPT_CHECK(static_cast<int64_t>(d.images.size()) == d.size() * d.sample_numel())
      << "dataset: " << d.images.size() << " pixel bytes for " << d.size() << " samples of "
      << d.sample_numel() << ", expected " << d.size() * d.sample_numel();
  for (int64_t i = 0; i < d.size(); ++i) {
    DPT_CHECK(d.labels[i] >= 0 && d.labels[i] < d.classes)
        << "dataset: label " << d.labels[i] << " of sample " << i << " is out of range, expected 0.."
        << d.classes - 1;
  }
  DPT_CHECK(static_cast<int64_t>(d.normalization.mean.size()) == d.channels &&
            static_cast<int64_t>(d.normalization.std.size()) == d.channels)
      << "dataset: normalization has " << d.normalization.mean.size() << " means and "
      << d.normalization.std.size() << " stds, expected one of each per channel (" << d.channels << ")";
  for (float s : d.normalization.std) DPT_CHECK(s > 0) << "dataset: normalization std must be > 0, got " << s;
}

void dataset_check_split(const Dataset& train, const Dataset& test, const std::string& name) {
  auto geometry = [](const Dataset& d) {
    return std::to_string(d.channels) + "x" + std::to_string(d.height) + "x" + std::to_string(d.width) + " images, " +
           std::to_string(d.classes) + " classes";
  };
  DPT_CHECK(train.channels == test.channels && train.height == test.height && train.width == test.width &&
            train.classes == test.classes)
      << name << ": the training set has " << geometry(train) << " but the test set has " << geometry(test)
      << "; both must be the same";
}

void dataset_sample_to_float(const Dataset& d, int64_t index, float* out) {
  const int64_t plane = d.height * d.width;
  const uint8_t* src = d.images.data() + index * d.sample_numel();
  for (int64_t c = 0; c < d.channels; ++c) {
    // Same arithmetic as the definition, folded into one multiply-add per pixel.
    const float scale = 1.0f / (255.0f * d.normalization.std[c]);
    const float shift = -d.normalization.mean[c] / d.normalization.std[c];
    for (int64_t i = 0; i < plane; ++i)
      out[c * plane + i] = static_cast<float>(src[c * plane + i]) * scale + shift;
  }
}

}  // namespace dpt::data
