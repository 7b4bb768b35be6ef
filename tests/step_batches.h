// The data of the DDP and ZeRO-1 equivalence tests: step k's global batch of kBatch 1x8x8
// images with labels in [0, 5), the same on every rank, and a run of its rows (one rank's
// share), so that n ranks and one process train on the same samples.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"

namespace dpt::testing {

constexpr int64_t kBatch = 24;  // divisible by 1, 2, 3 and 4 ranks

struct Data {
  Tensor images, labels;
};

// Step k's global batch, the same on every rank.
inline Data global_batch(int step) {
  Tensor x = Tensor::empty({kBatch, 1, 8, 8});
  Rng(100 + step).fill_normal(x, 0, 1);
  std::vector<int64_t> y(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) y[i] = (i * 7 + step) % 5;
  return {x, Tensor::from_vector(y, {kBatch})};
}

// Rows [begin, end) of `d`, as views.
inline Data rows(const Data& d, int64_t begin, int64_t end) {
  int64_t per = d.images.numel() / d.images.size(0);
  Tensor x = d.images.as_strided({end - begin, 1, 8, 8}, {64, 64, 8, 1}, d.images.offset() + begin * per);
  Tensor y = d.labels.as_strided({end - begin}, {1}, d.labels.offset() + begin);
  return {x, y};
}

}  // namespace dpt::testing
