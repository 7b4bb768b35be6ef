// acc[i] = acc[i] op in[i]: the elementwise step of the shared-memory all-reduces
// (shm_all_reduce.cpp, shm_buffer.cpp). avg sums; its caller divides.
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

}  // namespace dpt::dist
