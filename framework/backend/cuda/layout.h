// Which of the two 4-D layouts a CUDA kernel addresses a tensor in: NCHW (contiguous) or
// NHWC (channels-last). A tensor with C == 1 or H == W == 1 is both, with the same bytes,
// so either answer is right for it.
#pragma once

#include "core/tensor.h"

namespace dpt::cuda {

// Returns true for channels-last, false for contiguous; Error naming `op` for other strides.
inline bool layout_nhwc(const Tensor& t, const char* op) {
  if (t.is_contiguous()) return false;
  DPT_CHECK(t.dim() == 4 && t.is_channels_last())
      << op << " on cuda: needs a contiguous (NCHW) or channels-last (NHWC) tensor, got shape "
      << shape_str(t.shape()) << " with strides " << shape_str(t.strides());
  return true;
}

// Whether t can be addressed in the given layout (a tensor that is both passes either way).
inline bool has_layout(const Tensor& t, bool nhwc) { return nhwc ? t.is_channels_last() : t.is_contiguous(); }

// Whether a and b hold every element at the same place in their buffers, so one flat loop
// serves both: one shape, both dense, the same strides on every dimension longer than 1. A
// size-1 dimension's stride is arbitrary: a channels-last [N, C, 1, 1] tensor is also
// contiguous, and Tensor::empty_like gives its twin the contiguous strides.
inline bool same_dense_layout(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || !a.is_dense() || !b.is_dense()) return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) > 1 && a.strides()[d] != b.strides()[d]) return false;
  return true;
}

}  // namespace dpt::cuda
