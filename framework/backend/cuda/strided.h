// Strided addressing for kernels that walk a tensor in row-major order of its shape while
// reading or writing through arbitrary strides (broadcasts, transposes, layout changes).
// Included by .cu files only.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/shape.h"

namespace dpt::cuda {

constexpr int kMaxDims = 8;

// Sizes and element strides of up to kMaxDims dimensions, passed to kernels by value.
struct Dims {
  int nd = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
};

// Offset of the element at row-major position `index` of `d.size`, using `stride`.
__device__ inline int64_t offset_of(int64_t index, const Dims& d, const int64_t* stride) {
  int64_t offset = 0;
  for (int k = d.nd - 1; k >= 0; --k) {
    offset += (index % d.size[k]) * stride[k];
    index /= d.size[k];
  }
  return offset;
}

// `shape` with `strides`; Error naming `op` beyond kMaxDims dimensions.
inline Dims dims_of(const Shape& shape, const Shape& strides, const char* op) {
  DPT_CHECK(shape.size() <= kMaxDims)
      << op << " on cuda: at most " << kMaxDims << " dimensions, got " << shape_str(shape);
  Dims d;
  d.nd = static_cast<int>(shape.size());
  for (int k = 0; k < d.nd; ++k) {
    d.size[k] = shape[k];
    d.stride[k] = strides[k];
  }
  return d;
}

// The 4-D index (n, c, y, x) of element i of an [N, C, H, W] tensor stored NCHW (row-major)
// or NHWC (channels-last), and back.
struct Index4 {
  int64_t n, c, y, x;
};

template <bool nhwc>
__device__ __forceinline__ Index4 index4_of(int64_t i, int64_t c, int64_t h, int64_t w) {
  if constexpr (nhwc) return {i / (c * h * w), i % c, (i / (c * w)) % h, (i / c) % w};
  return {i / (c * h * w), (i / (h * w)) % c, (i / w) % h, i % w};
}

template <bool nhwc>
__device__ __forceinline__ int64_t offset4(const Index4& k, int64_t c, int64_t h, int64_t w) {
  if constexpr (nhwc) return ((k.n * h + k.y) * w + k.x) * c + k.c;
  return ((k.n * c + k.c) * h + k.y) * w + k.x;
}

}  // namespace dpt::cuda
