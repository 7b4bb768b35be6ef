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

// A new uninitialised 4-D tensor in NHWC when `nhwc`, else NCHW.
inline Tensor empty_in_layout(const Shape& shape, DType dtype, Device device, bool nhwc) {
  return nhwc ? Tensor::empty_channels_last(shape, dtype, device) : Tensor::empty(shape, dtype, device);
}

}  // namespace dpt::cuda
