// The stages of the hierarchical all-reduce (hierarchical.h) and the compressing view of a
// group that DDP's Reducer all-reduces through.
#include "comm/hierarchical.h"

#include <algorithm>

#include "core/error.h"
#include "comm/combine.h"
#include "comm/comm_thread.h"
#include "comm/mpi_process_group.h"

namespace dpt::dist {
namespace {

// Elements [begin, end) of a contiguous tensor, as a 1-D view.
Tensor slice(const Tensor& t, int64_t begin, int64_t end) {
  return t.as_strided({end - begin}, {1}, t.offset() + begin);
}

// Rounds each element to bf16, to nearest, ties to even (core/dtype.h).
void round_to_bf16(const Tensor& out, const Tensor& in) {
  const float* src = in.data<float>();
  auto* dst = static_cast<uint16_t*>(out.raw_data());
  for (int64_t i = 0, n = in.numel(); i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

void widen_from_bf16(const Tensor& out, const Tensor& in) {
  const auto* src = static_cast<const uint16_t*>(in.raw_data());
  float* dst = out.data<float>();
  for (int64_t i = 0, n = out.numel(); i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

// What the stages reduce with: avg sums, and divides once at the end.
ReduceOp stage_op(ReduceOp op) { return op == ReduceOp::avg ? ReduceOp::sum : op; }

}  // namespace

HierarchicalAllReduce::HierarchicalAllReduce(const HostGroups& groups, const Tensor& t, ReduceOp op,
                                             bool bf16, int group_size)
    : groups_(groups),
      t_(t.as_strided({t.numel()}, {1}, t.offset())),
      op_(op),
      wire_dtype_(bf16 ? DType::bf16 : t.dtype()),
      group_size_(group_size) {}

bool HierarchicalAllReduce::progress() {
  if (work_) {
    if (!work_->test()) return false;
    work_->wait();  // rethrows the stage's error
    work_.reset();
  }
  switch (stage_) {
    case 0:
      stage_ = 1;
      if (groups_.host) {
        const ProcessGroup& host = *groups_.host;
        const Chunk mine = chunk_of(t_.numel(), host.size(), host.rank());
        share_ = Tensor::empty({mine.end - mine.begin}, t_.dtype());
        work_ = groups_.host->reduce_scatter(share_, t_, stage_op(op_));
        return false;
      }
      share_ = t_;  // one rank per host: the share is the whole tensor
      [[fallthrough]];
    case 1:
      post_exchange();
      return false;
    case 2:
      post_gather();
      return false;
    case 3:
      stage_ = 4;
      if (wire_dtype_ != share_.dtype()) widen_from_bf16(share_, gathered_);
      if (groups_.host) {
        work_ = groups_.host->all_gather(t_, share_);
        return false;
      }
      [[fallthrough]];
    default:
      stage_ = 5;
      share_ = wire_ = blocks_ = mine_ = gathered_ = Tensor();
      return true;
  }
}

void HierarchicalAllReduce::post_exchange() {
  stage_ = 2;
  const ProcessGroup& across = *groups_.across;
  const int hosts = across.size();
  const int64_t m = share_.numel();
  if (wire_dtype_ == share_.dtype()) {
    wire_ = share_;
  } else {
    wire_ = Tensor::empty({m}, wire_dtype_);
    round_to_bf16(wire_, share_);  // the first rounding: this host's partial sum
  }
  // Block h of the share goes to host h; this rank gets its own block of every host's share.
  std::vector<int64_t> in_splits(hosts), out_splits(hosts);
  const Chunk own = chunk_of(m, hosts, across.rank());
  for (int h = 0; h < hosts; ++h) {
    const Chunk block = chunk_of(m, hosts, h);
    in_splits[h] = block.end - block.begin;
    out_splits[h] = own.end - own.begin;
  }
  blocks_ = Tensor::empty({hosts * (own.end - own.begin)}, wire_dtype_);
  work_ = groups_.across->all_to_all(blocks_, wire_, out_splits, in_splits);
}

void HierarchicalAllReduce::post_gather() {
  stage_ = 3;
  const ProcessGroup& across = *groups_.across;
  const int hosts = across.size();
  const Chunk own = chunk_of(share_.numel(), hosts, across.rank());
  const int64_t m = own.end - own.begin;
  // The reduction over the hosts, in host order, in the share's dtype (f32 for bf16 wires).
  const Tensor sum = slice(share_, own.begin, own.end);
  Tensor blocks = blocks_;
  if (wire_dtype_ != share_.dtype()) {
    blocks = Tensor::empty({blocks_.numel()});
    widen_from_bf16(blocks, blocks_);  // exact
  }
  with_element_type(share_.dtype(), [&](auto zero) {
    using T = decltype(zero);
    combine_blocks(sum.data<T>(), [&](int h) { return blocks.data<T>() + h * m; }, hosts, m, stage_op(op_));
  });
  if (op_ == ReduceOp::avg) divide(sum, group_size_);
  if (wire_dtype_ == share_.dtype()) {
    // In place: this rank's block of the share is its own chunk of the all-gather's output.
    gathered_ = share_;
    work_ = groups_.across->all_gather(share_, sum);
    return;
  }
  mine_ = Tensor::empty({m}, wire_dtype_);
  round_to_bf16(mine_, sum);  // the second rounding: the result, once, on the rank that owns it
  gathered_ = Tensor::empty({share_.numel()}, wire_dtype_);
  work_ = groups_.across->all_gather(gathered_, mine_);
}

std::string HierarchicalAllReduce::stage_text() const {
  if (stage_ < 1 || stage_ > 4) return "";
  const std::string what = work_ ? work_->describe() : "";
  return "; in stage " + std::to_string(stage_) + " of 4" + (what.empty() ? "" : " (" + what + ")");
}

WorkPtr all_reduce_bf16_across_hosts(ProcessGroup& group, const Tensor& bucket, ReduceOp op) {
  // Looked up per call rather than captured: a hook outliving its group finds none.
  std::shared_ptr<MpiProcessGroup> mpi = made_by_dist(&group);
  DPT_CHECK(mpi) << "bf16 compression on " << group.name() << ": it needs a live group that dist made";
  return mpi->all_reduce_as(bucket, op, true);
}

}  // namespace dpt::dist
