// The backend-independent pieces of process_group.h: names for messages, how n elements
// are split into per-rank chunks for all_gather and reduce_scatter, and the argument checks
// of the rooted collectives and all_to_all that both backends share.
#include "comm/process_group.h"

#include <cstdio>

#include <algorithm>
#include <numeric>

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

bool overlaps(const Tensor& a, const Tensor& b) {
  const size_t na = a.numel() * dtype_size(a.dtype()), nb = b.numel() * dtype_size(b.dtype());
  if (na == 0 || nb == 0) return false;
  const char* pa = static_cast<const char*>(a.raw_data());
  const char* pb = static_cast<const char*>(b.raw_data());
  return pa < pb + nb && pb < pa + na;
}

namespace {

// gather's or scatter's checks; `whole` is the tensor of size() blocks that only root has.
void check_blocks(const ProcessGroup& group, const char* op, const Tensor& whole, const char* whole_name,
                  const Tensor& part, const char* part_name, int root) {
  DPT_CHECK(root >= 0 && root < group.size())
      << op << " on " << group.name() << ": root " << root << " is not a rank of this group of "
      << group.size() << " (0.." << group.size() - 1 << ")";
  if (group.rank() != root) return;
  DPT_CHECK(whole.dtype() == part.dtype())
      << op << " on " << group.name() << ": " << whole_name << " is " << dtype_name(whole.dtype()) << " but "
      << part_name << " is " << dtype_name(part.dtype());
  DPT_CHECK(whole.numel() == group.size() * part.numel())
      << op << " on " << group.name() << ": root " << root << "'s " << whole_name << " must hold "
      << group.size() << " x " << part.numel() << " = " << group.size() * part.numel()
      << " elements (a block of " << part_name << "'s size per rank), got " << whole.numel();
  DPT_CHECK(!overlaps(whole, part)) << op << " on " << group.name() << ": out overlaps in";
}

// One side of all_to_all: `splits` (empty: equal) of n elements, checked.
void layout_side(const ProcessGroup& group, const char* what, const std::vector<int64_t>& splits, int64_t n,
                 std::vector<int64_t>& counts, std::vector<int64_t>& offsets) {
  const int size = group.size();
  if (splits.empty()) {
    DPT_CHECK(n % size == 0) << "all_to_all on " << group.name() << ": " << what << " has " << n
                             << " elements, which do not split equally over " << size
                             << " ranks (pass the splits)";
    counts.assign(size, n / size);
  } else {
    DPT_CHECK(static_cast<int>(splits.size()) == size)
        << "all_to_all on " << group.name() << ": " << splits.size() << " " << what
        << " splits for a group of " << size << " ranks (one per rank)";
    for (int r = 0; r < size; ++r)
      DPT_CHECK(splits[r] >= 0) << "all_to_all on " << group.name() << ": " << what << " split " << r
                                << " is " << splits[r] << " (must be >= 0)";
    const int64_t total = std::accumulate(splits.begin(), splits.end(), int64_t{0});
    DPT_CHECK(total == n) << "all_to_all on " << group.name() << ": the " << what << " splits add up to "
                          << total << " elements, but " << what << " has " << n;
    counts = splits;
  }
  offsets.assign(size, 0);
  for (int r = 1; r < size; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
}

}  // namespace

void check_gather(const ProcessGroup& group, const Tensor& out, const Tensor& in, int root) {
  check_blocks(group, "gather", out, "out", in, "in", root);
}

void check_scatter(const ProcessGroup& group, const Tensor& out, const Tensor& in, int root) {
  check_blocks(group, "scatter", in, "in", out, "out", root);
}

AllToAllLayout all_to_all_layout(const ProcessGroup& group, const Tensor& out, const Tensor& in,
                                 const std::vector<int64_t>& out_splits,
                                 const std::vector<int64_t>& in_splits) {
  DPT_CHECK(in.dtype() == out.dtype()) << "all_to_all on " << group.name() << ": out is "
                                       << dtype_name(out.dtype()) << " but in is " << dtype_name(in.dtype());
  DPT_CHECK(!overlaps(in, out)) << "all_to_all on " << group.name() << ": out overlaps in";
  AllToAllLayout layout;
  layout_side(group, "out", out_splits, out.numel(), layout.out_counts, layout.out_offsets);
  layout_side(group, "in", in_splits, in.numel(), layout.in_counts, layout.in_offsets);
  const int me = group.rank();
  DPT_CHECK(layout.in_counts[me] == layout.out_counts[me])
      << "all_to_all on " << group.name() << ": rank " << me << " sends itself " << layout.in_counts[me]
      << " elements (in split " << me << ") but expects " << layout.out_counts[me] << " (out split " << me
      << ")";
  return layout;
}

std::string timeout_text(std::chrono::milliseconds timeout) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g s", static_cast<double>(timeout.count()) / 1000.0);
  return std::string(": not complete after ") + seconds + " (distributed.timeout_s, DPT_DIST_TIMEOUT_S)";
}

std::vector<WorkPtr> ProcessGroup::batch_send_recv(const std::vector<P2POp>& ops) {
  std::vector<WorkPtr> works;
  for (const P2POp& op : ops) works.push_back(op.send ? send(op.tensor, op.peer, op.tag) : recv(op.tensor, op.peer, op.tag));
  return works;
}

}  // namespace dpt::dist
