// Element types. f32 is the type of every parameter and activation on CPU; bf16/f16 serve
// mixed precision on CUDA; i64 holds class labels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dpt {

enum class DType { f32, bf16, f16, i64 };

// Per DType, in its order: the element size in bytes and the name messages print.
struct DTypeInfo {
  size_t size;
  const char* name;
};
constexpr DTypeInfo kDTypeInfo[] = {{4, "f32"}, {2, "bf16"}, {2, "f16"}, {8, "i64"}};

constexpr size_t dtype_size(DType t) { return kDTypeInfo[static_cast<int>(t)].size; }
constexpr const char* dtype_name(DType t) { return kDTypeInfo[static_cast<int>(t)].name; }

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
