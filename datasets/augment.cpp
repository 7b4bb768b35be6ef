// Crop and flip as row copies: each output row is a pad fill, a memcpy or a reversed copy
// of one source row, so a batch costs about one pass over its memory. Draws come from a
// counter-based hash (splitmix64), not from a generator's state.
#include "datasets/augment.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "datasets/shuffle.h"

namespace dpt::data {
namespace {

// Uniform in [0, n) from 31 random bits by multiply-shift (bias below n / 2^31).
int64_t below(uint64_t bits31, int64_t n) {
  return static_cast<int64_t>((bits31 * static_cast<uint64_t>(n)) >> 31);
}

// Writes one augmented row: out[x] = src[x + dx] (or src[W-1-x + dx] when flipped) where
// that index is inside [0, w), else pad. `src` is null for a row outside the image.
void row_write(float* out, const float* src, int64_t w, int64_t dx, bool flip, float pad) {
  if (src == nullptr) {
    std::fill(out, out + w, pad);
    return;
  }
  // The x whose source index falls inside the row.
  const int64_t lo = std::clamp(flip ? dx : -dx, int64_t{0}, w);
  const int64_t hi = std::clamp(flip ? w + dx : w - dx, lo, w);
  std::fill(out, out + lo, pad);
  if (flip) {
    const float* s = src + (w - 1 + dx);
    for (int64_t x = lo; x < hi; ++x) out[x] = s[-x];
  } else {
    std::memcpy(out + lo, src + lo + dx, static_cast<size_t>(hi - lo) * sizeof(float));
  }
  std::fill(out + hi, out + w, pad);
}

}  // namespace

AugmentDraw augment_draw(const AugmentOptions& options, uint64_t seed, int64_t epoch, int64_t batch,
                         int64_t sample) {
  uint64_t bits = mix64(seed);
  for (int64_t v : {epoch, batch, sample}) bits = mix64(bits ^ static_cast<uint64_t>(v));
  AugmentDraw draw;
  const int64_t p = options.padding, choices = 2 * p + 1;
  // Disjoint bits for each choice: 0..30 for dy, 31..61 for dx, 63 for the flip.
  draw.dy = below(bits & 0x7fffffffu, choices) - p;
  draw.dx = below((bits >> 31) & 0x7fffffffu, choices) - p;
  draw.flip = options.flip && (bits >> 63) != 0;
  return draw;
}

std::vector<float> augment_pad_values(const Normalization& normalization) {
  std::vector<float> pad(normalization.mean.size());
  for (size_t c = 0; c < pad.size(); ++c) pad[c] = -normalization.mean[c] / normalization.std[c];
  return pad;
}

void augment_batch(Tensor& images, const AugmentOptions& options, const std::vector<float>& pad_values,
                   uint64_t seed, int64_t epoch, int64_t batch) {
  DPT_CHECK(images.dim() == 4 && images.dtype() == DType::f32 && images.is_contiguous() &&
            images.device().is_cpu())
      << "augment: expected contiguous f32 CPU images [B, C, H, W]";
  const int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  DPT_CHECK(static_cast<int64_t>(pad_values.size()) == c)
      << "augment: " << pad_values.size() << " pad values for " << c << " channels";
  DPT_CHECK(options.padding >= 0) << "augment: padding must be >= 0, got " << options.padding;
  const int64_t numel = c * h * w;
  std::vector<float> source(static_cast<size_t>(numel));
  float* data = images.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const AugmentDraw d = augment_draw(options, seed, epoch, batch, i);
    if (d.dy == 0 && d.dx == 0 && !d.flip) continue;
    float* sample = data + i * numel;
    std::memcpy(source.data(), sample, static_cast<size_t>(numel) * sizeof(float));
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t y = 0; y < h; ++y) {
        const int64_t sy = y + d.dy;
        const float* src = sy >= 0 && sy < h ? source.data() + (ch * h + sy) * w : nullptr;
        row_write(sample + (ch * h + y) * w, src, w, d.dx, d.flip, pad_values[ch]);
      }
    }
  }
}

std::function<void(Batch&, int64_t, int64_t)> make_augment_transform(const AugmentOptions& options,
                                                   const Normalization& normalization, uint64_t seed,
                                                   int64_t stream) {
  DPT_CHECK(options.padding >= 0) << "augment: padding must be >= 0, got " << options.padding;
  const std::vector<float> pad = augment_pad_values(normalization);
  // A Weyl step per stream: stream 0 keeps the seed, so the transform matches augment_batch.
  const uint64_t mixed = seed + static_cast<uint64_t>(stream) * 0x9e3779b97f4a7c15ull;
  return [options, pad, mixed](Batch& batch, int64_t epoch, int64_t batch_index) {
    augment_batch(batch.images, options, pad, mixed, epoch, batch_index);
  };
}

}  // namespace dpt::data
