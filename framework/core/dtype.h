// Element types. f32 is the type of every parameter and activation on CPU; bf16/f16 serve
// mixed precision on CUDA; i64 holds class labels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dpt {

enum class DType { f32, bf16, f16, i64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i64: return 8;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i64: return "i64";
  }
  return "?";
}

// bf16 is the upper half of an f32: the conversion down rounds to nearest, ties to even
// (as CUDA's __float2bfloat16 does), and keeps NaN a NaN. Host-side helpers for tests
// and for reading bf16 tensors back; kernels use cuda_bf16.h.
inline float bf16_to_float(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }

}  // namespace dpt
