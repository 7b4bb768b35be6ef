// Synthetic data from std::mt19937_64, whose output sequence the standard fixes, so the
// bytes are the same everywhere (no std::uniform_*_distribution, which is not).
#include "datasets/synthetic.h"

#include <unistd.h>

#include <random>
#include <string>

#include "core/error.h"

namespace dpt::data {

Dataset make_synthetic(int64_t channels, int64_t height, int64_t width, int64_t classes, int64_t size,
                       uint64_t seed) {
  DPT_CHECK(channels > 0 && height > 0 && width > 0 && classes > 0 && size > 0)
      << "synthetic dataset: shape [" << channels << ", " << height << ", " << width << "], classes "
      << classes << " and size " << size << " must all be > 0";
  // The arguments come from a config: check what they ask for before allocating it.
  int64_t sample = 0, pixels = 0, bytes = 0;
  const bool fits = !__builtin_mul_overflow(channels, height, &sample) &&
                    !__builtin_mul_overflow(sample, width, &sample) &&
                    !__builtin_mul_overflow(sample, size, &pixels) &&
                    !__builtin_add_overflow(pixels, size * static_cast<int64_t>(sizeof(int64_t)), &bytes);
  const int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  DPT_CHECK(fits && bytes <= memory) << "synthetic dataset: " << size << " samples of " << channels << "x"
                                     << height << "x" << width << " need "
                                     << (fits ? std::to_string(bytes / (1 << 20)) + " MiB (" +
                                                    std::to_string(sample + 8) + " bytes each)"
                                              : std::string("more than 2^63 bytes"))
                                     << ", more than this machine's memory (" << memory / (1 << 20)
                                     << " MiB)";
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
