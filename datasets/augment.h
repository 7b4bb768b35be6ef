// Training-time augmentation of normalised float batches: the standard CIFAR recipe of a
// random crop from the zero-padded image and a random horizontal flip. Every draw is a
// pure function of (seed, stream, epoch, batch, sample), so runs repeat exactly whatever
// the threads' timing.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "datasets/dataset.h"
#include "datasets/loader.h"

namespace dpt::data {

struct AugmentOptions {
  // Random crop of the image's own size from the image padded by this many pixels on
  // each side: offsets dy, dx uniform in [-padding, padding]. 0: no crop.
  int64_t padding = 4;
  bool flip = true;  // mirror left-right with probability 1/2
};

// What happens to one sample: out[c][y][x] = in[c][y + dy][x' + dx] with x' = W-1-x when
// flip, else x; the pad value where that falls outside the image.
struct AugmentDraw {
  int64_t dy = 0;
  int64_t dx = 0;
  bool flip = false;
};

// Sample `sample` of batch `batch` of `epoch`. Ensures: |dy|, |dx| <= options.padding; the
// same arguments give the same draw on every platform.
AugmentDraw augment_draw(const AugmentOptions& options, uint64_t seed, int64_t epoch, int64_t batch,
                         int64_t sample);

// The value a pixel of 0 takes after normalisation, per channel: -mean[c] / std[c]. The
// padding is that value, as when torchvision pads the image before normalising it.
std::vector<float> augment_pad_values(const Normalization& normalization);

// Augments `images` (f32 [B, C, H, W], contiguous, CPU) in place, sample i by
// augment_draw(options, seed, epoch, batch, i). Requires: pad_values.size() == C,
// 0 <= options.padding.
void augment_batch(Tensor& images, const AugmentOptions& options, const std::vector<float>& pad_values,
                   uint64_t seed, int64_t epoch, int64_t batch);

// The Loader's `transform` for training: augment_batch with the seed mixed with `stream`
// (e.g. the rank, so ranks draw independently from one seed), at the epoch and batch
// index the Loader passes.
std::function<void(Batch&, int64_t, int64_t)> make_augment_transform(const AugmentOptions& options,
                                                   const Normalization& normalization, uint64_t seed,
                                                   int64_t stream = 0);

}  // namespace dpt::data
