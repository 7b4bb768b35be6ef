// acc[i] = acc[i] op in[i]: the elementwise step of the reductions the CPU does itself
// (shared memory, reduce_scatter's pairwise exchange, the hierarchical all-reduce). avg sums;
// its caller divides.
#pragma once

#include <algorithm>
#include <cstdint>

#include "comm/process_group.h"

namespace dpt::dist {

template <class T>
void combine(T* __restrict acc, const T* __restrict in, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      for (int64_t i = 0; i < n; ++i) acc[i] += in[i];
      break;
    case ReduceOp::min:
      for (int64_t i = 0; i < n; ++i) acc[i] = std::min(acc[i], in[i]);
      break;
    case ReduceOp::max:
      for (int64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], in[i]);
      break;
  }
}

// acc = op over block(0), block(1), ..., block(count - 1) (n elements each), in that order.
template <class T, class Block>
void combine_blocks(T* acc, Block block, int count, int64_t n, ReduceOp op) {
  std::copy(block(0), block(0) + n, acc);
  for (int b = 1; b < count; ++b) combine(acc, block(b), n, op);
}

// f(T()) with T the element type the CPU reduces for `dtype`: int64_t for i64, else float.
template <class F>
void with_element_type(DType dtype, F f) {
  if (dtype == DType::i64)
    f(int64_t());
  else
    f(float());
}

// t /= divisor, elementwise (avg's last step; integers truncate toward zero).
inline void divide(const Tensor& t, int divisor) {
  with_element_type(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] /= static_cast<T>(divisor);
  });
}

}  // namespace dpt::dist
