// Synthetic data from std::mt19937_64, whose output sequence the standard fixes, so the
// bytes are the same everywhere (no std::uniform_*_distribution, which is not).
#include "datasets/synthetic.h"

#include <random>

#include "core/error.h"

namespace dpt::data {

Dataset make_synthetic(int64_t channels, int64_t height, int64_t width, int64_t classes, int64_t size,
                       uint64_t seed) {
  DPT_CHECK(channels > 0 && height > 0 && width > 0 && classes > 0 && size > 0)
      << "synthetic dataset: shape [" << channels << ", " << height << ", " << width << "], classes "
      << classes << " and size " << size << " must all be > 0";
  Dataset d;
  d.channels = channels;
  d.height = height;
  d.width = width;
  d.classes = classes;
  d.normalization = {std::vector<float>(channels, 0.5f), std::vector<float>(channels, 0.2898f)};
  std::mt19937_64 engine(seed);
  d.images.resize(static_cast<size_t>(size * d.sample_numel()));
  for (size_t i = 0; i < d.images.size(); i += 8) {
    uint64_t bits = engine();
    for (size_t b = 0; b < 8 && i + b < d.images.size(); ++b)
      d.images[i + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
  d.labels.resize(static_cast<size_t>(size));
  // The modulo bias is below 2^-50 for any realistic class count.
  for (auto& label : d.labels) label = static_cast<int64_t>(engine() % static_cast<uint64_t>(classes));
  return d;
}

}  // namespace dpt::data
