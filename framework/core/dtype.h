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

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }

}  // namespace dpt
