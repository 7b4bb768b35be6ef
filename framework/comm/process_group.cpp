// The backend-independent pieces of process_group.h: names for messages, how n elements
// are split into per-rank chunks for all_gather and reduce_scatter, the counts.
#include "comm/process_group.h"

#include <cstdio>

#include <algorithm>

namespace dpt::dist {

const char* reduce_op_name(ReduceOp op) {
  static constexpr const char* kNames[] = {"sum", "avg", "min", "max"};
  return kNames[static_cast<int>(op)];
}

Chunk chunk_of(int64_t n, int size, int rank) {
  DPT_CHECK(n >= 0 && size > 0 && rank >= 0 && rank < size)
      << "chunk_of(n " << n << ", size " << size << ", rank " << rank
      << "): needs n >= 0, size > 0 and 0 <= rank < size";
  int64_t base = n / size, extra = n % size;
  int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

CollectiveCounts& CollectiveCounts::operator+=(const CollectiveCounts& other) {
  collectives += other.collectives;
  bytes += other.bytes;
  return *this;
}

CollectiveCounts CollectiveCounts::operator-(const CollectiveCounts& other) const {
  return {collectives - other.collectives, bytes - other.bytes};
}

void ProcessGroup::count_collective(const Tensor& a, const Tensor& b) {
  auto bytes = [](const Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(dtype_size(t.dtype())) : int64_t{0};
  };
  collectives_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(std::max(bytes(a), bytes(b)), std::memory_order_relaxed);
}

std::string seconds_text(std::chrono::duration<double> d) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", d.count());
  return text;
}

std::string timeout_text(std::chrono::milliseconds timeout) {
  return ": not complete after " + seconds_text(timeout) + " (distributed.timeout_s, DPT_DIST_TIMEOUT_S)";
}

}  // namespace dpt::dist
