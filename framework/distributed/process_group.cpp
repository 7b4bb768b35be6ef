// The backend-independent pieces of process_group.h: names for messages, and how n
// elements are split into per-rank chunks for all_gather and reduce_scatter.
#include "distributed/process_group.h"

#include <algorithm>

namespace dpt::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

Chunk chunk_of(int64_t n, int size, int rank) {
  DPT_CHECK(n >= 0 && size > 0 && rank >= 0 && rank < size)
      << "chunk_of(n " << n << ", size " << size << ", rank " << rank
      << "): needs n >= 0, size > 0 and 0 <= rank < size";
  int64_t base = n / size, extra = n % size;
  int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace dpt::dist
