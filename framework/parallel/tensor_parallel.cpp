#include "parallel/tensor_parallel.h"

#include "comm/dist.h"
#include "ops/activation.h"
#include "ops/cast.h"
#include "ops/elementwise.h"
#include "ops/parallel_region.h"
#include "ops/shape.h"

namespace dpt::nn {
namespace {

// This rank's part of dimension `dim` of a parallel layer's weight (or bias).
Tensor my_shard(const Tensor& full, int64_t dim, const dist::GroupPtr& tp, const char* layer) {
  dist::ProcessGroup& group = dist::require_member(tp, std::string(layer) + "'s tensor-parallel group");
  return shard_of(full, dim, group.rank(), group.size());
}

SumAcrossRanks sum_over(const dist::GroupPtr& group) {
  return [group](const Tensor& t) { group->all_reduce(t, dist::ReduceOp::sum)->wait(); };
}

Tensor undefined_or_shard(const Tensor& full, const dist::GroupPtr& tp, const char* layer) {
  return full.defined() ? my_shard(full, 0, tp, layer) : Tensor();
}

// A row-parallel layer's own copy of the unsplit bias: it is added after the sum, whole.
Tensor bias_copy(const Tensor& bias) { return bias.defined() ? bias.clone() : Tensor(); }

// y + bias, the bias ([C]) broadcast over the dimensions after C and cast to y's dtype.
Tensor add_bias(const Tensor& y, const Tensor& bias) {
  if (!bias.defined()) return y;
  Shape shape(y.dim() - 1, 1);
  shape[0] = bias.numel();
  return add(y, reshape(cast(bias, y.dtype()), shape));
}

void check_not_grouped(const Conv2d& full, const char* layer) {
  DPT_CHECK(full.options().groups == 1)
      << layer << ": splits ungrouped convolutions only, got groups " << full.options().groups;
}

// "ColumnParallelLinear(784, 256, tp 2)": the unsplit layer's sizes and how many ranks share it.
std::string sizes_str(const char* layer, int64_t in, int64_t out, int tp, const std::string& more = "") {
  return std::string(layer) + "(" + std::to_string(in) + ", " + std::to_string(out) + more + ", tp " +
         std::to_string(tp) + ")";
}

std::string conv_str(const Conv2d& conv) {
  const Conv2dOptions& o = conv.options();
  return ", kernel " + std::to_string(conv.weight().size(2)) + ", stride " + std::to_string(o.stride) +
         ", padding " + std::to_string(o.padding);
}

}  // namespace

Tensor shard_of(const Tensor& full, int64_t dim, int rank, int size) {
  DPT_CHECK(dim >= 0 && dim < full.dim() && size >= 1 && rank >= 0 && rank < size)
      << "shard_of: dimension " << dim << " of " << shape_str(full.shape()) << ", rank " << rank << " of "
      << size;
  DPT_CHECK(full.size(dim) % size == 0)
      << "shard_of: dimension " << dim << " of " << shape_str(full.shape()) << " (" << full.size(dim)
      << ") does not split into " << size << " equal parts";
  Shape shape = full.shape();
  shape[dim] /= size;
  return full.as_strided(shape, full.strides(), full.offset() + rank * shape[dim] * full.strides()[dim])
      .clone();
}

Tensor gather_shards(const Tensor& shard, int64_t dim, dist::ProcessGroup& group) {
  DPT_CHECK(dim >= 0 && dim < shard.dim())
      << "gather_shards: dimension " << dim << " of " << shape_str(shard.shape());
  const int n = group.size();
  Tensor local = shard.detach().contiguous();
  Tensor all = Tensor::empty({local.numel() * n}, local.dtype(), local.device());
  group.all_gather(all, local)->wait();
  all = all.to(Device::cpu());
  // `all` is [n, shard...]; the rank axis moves to just before `dim`, then merges with it.
  Shape shape = local.shape(), strides = shape_contiguous_strides(shape);
  shape.insert(shape.begin() + dim, n);
  strides.insert(strides.begin() + dim, local.numel());
  Shape whole = local.shape();
  whole[dim] *= n;
  return all.as_strided(shape, strides, 0).clone().view(whole);
}

NamedTensors gather_whole_state(const NamedTensors& mine, const NamedTensors& unsplit,
                                dist::ProcessGroup& group) {
  DPT_CHECK(mine.size() == unsplit.size())
      << "gather_whole_state: " << mine.size() << " tensors, the unsplit model has " << unsplit.size();
  NamedTensors whole;
  for (size_t i = 0; i < mine.size(); ++i) {
    const auto& [name, t] = mine[i];
    const Shape& want = unsplit[i].second.shape();
    DPT_CHECK(name == unsplit[i].first && t.dim() == static_cast<int64_t>(want.size()))
        << "gather_whole_state: tensor " << i << " is " << name << " " << shape_str(t.shape())
        << ", the unsplit model's " << unsplit[i].first << " " << shape_str(want);
    int64_t split = -1, differing = 0;
    for (int64_t d = 0; d < t.dim(); ++d)
      if (t.size(d) != want[d]) split = d, ++differing;
    DPT_CHECK(differing == 0 || (differing == 1 && t.size(split) * group.size() == want[split]))
        << "gather_whole_state: " << name << " " << shape_str(t.shape()) << " is not one of " << group.size()
        << " slices of " << shape_str(want);
    whole.emplace_back(name, split < 0 ? t : gather_shards(t, split, group));
  }
  return whole;
}

ColumnParallelLinear::ColumnParallelLinear(const Linear& full, dist::GroupPtr tp)
    : Linear(my_shard(full.weight(), 0, tp, "ColumnParallelLinear"),
             undefined_or_shard(full.bias(), tp, "ColumnParallelLinear")),
      tp_(std::move(tp)),
      sum_(sum_over(tp_)) {}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  return Linear::forward(copy_to_parallel_region(x, sum_));
}

Tensor ColumnParallelLinear::forward_relu(const Tensor& x) {
  return Linear::forward_relu(copy_to_parallel_region(x, sum_));
}

std::string ColumnParallelLinear::describe() const {
  return sizes_str("ColumnParallelLinear", weight().size(1), weight().size(0) * tp_->size(), tp_->size());
}

RowParallelLinear::RowParallelLinear(const Linear& full, dist::GroupPtr tp)
    : Linear(my_shard(full.weight(), 1, tp, "RowParallelLinear"), Tensor()),
      tp_(std::move(tp)),
      sum_(sum_over(tp_)) {
  if (full.bias().defined()) bias_ = register_parameter("bias", bias_copy(full.bias()));
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  return add_bias(reduce_from_parallel_region(Linear::forward(x), sum_), bias_);
}

Tensor RowParallelLinear::forward_relu(const Tensor& x) { return relu(forward(x)); }

std::string RowParallelLinear::describe() const {
  return sizes_str("RowParallelLinear", weight().size(1) * tp_->size(), weight().size(0), tp_->size());
}

ColumnParallelConv2d::ColumnParallelConv2d(const Conv2d& full, dist::GroupPtr tp)
    : Conv2d(my_shard(full.weight(), 0, tp, "ColumnParallelConv2d"),
             undefined_or_shard(full.bias(), tp, "ColumnParallelConv2d"), full.options()),
      tp_(std::move(tp)),
      sum_(sum_over(tp_)) {
  check_not_grouped(full, "ColumnParallelConv2d");
}

Tensor ColumnParallelConv2d::forward(const Tensor& x) {
  return Conv2d::forward(copy_to_parallel_region(x, sum_));
}

Tensor ColumnParallelConv2d::forward_relu(const Tensor& x) {
  return Conv2d::forward_relu(copy_to_parallel_region(x, sum_));
}

std::string ColumnParallelConv2d::describe() const {
  return sizes_str("ColumnParallelConv2d", weight().size(1), weight().size(0) * tp_->size(), tp_->size(),
                   conv_str(*this));
}

RowParallelConv2d::RowParallelConv2d(const Conv2d& full, dist::GroupPtr tp)
    : Conv2d(my_shard(full.weight(), 1, tp, "RowParallelConv2d"), Tensor(), full.options()),
      tp_(std::move(tp)),
      sum_(sum_over(tp_)) {
  check_not_grouped(full, "RowParallelConv2d");
  if (full.bias().defined()) bias_ = register_parameter("bias", bias_copy(full.bias()));
}

Tensor RowParallelConv2d::forward(const Tensor& x) {
  return add_bias(reduce_from_parallel_region(Conv2d::forward(x), sum_), bias_);
}

Tensor RowParallelConv2d::forward_relu(const Tensor& x) { return relu(forward(x)); }

std::string RowParallelConv2d::describe() const {
  return sizes_str("RowParallelConv2d", weight().size(1) * tp_->size(), weight().size(0), tp_->size(),
                   conv_str(*this));
}

}  // namespace dpt::nn
