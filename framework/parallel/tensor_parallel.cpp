#include "parallel/tensor_parallel.h"

#include <type_traits>

#include "comm/dist.h"
#include "ops/activation.h"
#include "ops/cast.h"
#include "ops/elementwise.h"
#include "ops/parallel_region.h"
#include "ops/shape.h"

namespace dpt::nn {
namespace {

// y + bias, the bias ([C]) broadcast over the dimensions after C and cast to y's dtype.
Tensor add_bias(const Tensor& y, const Tensor& bias) {
  if (!bias.defined()) return y;
  Shape shape(y.dim() - 1, 1);
  shape[0] = bias.numel();
  return add(y, reshape(cast(bias, y.dtype()), shape));
}

template <class Layer, bool Row>
std::string layer_name() {
  return std::string(Row ? "RowParallel" : "ColumnParallel") +
         (std::is_same_v<Layer, Conv2d> ? "Conv2d" : "Linear");
}

// This rank's part of dimension `dim` of `full` (undefined stays undefined).
template <class Layer, bool Row>
Tensor my_shard(const Tensor& full, int64_t dim, const dist::GroupPtr& tp) {
  if (!full.defined()) return full;
  dist::ProcessGroup& group = dist::require_member(tp, layer_name<Layer, Row>() + "'s tensor-parallel group");
  return shard_of(full, dim, group.rank(), group.size());
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

template <class Layer, bool Row>
TensorParallel<Layer, Row>::TensorParallel(const Layer& full, dist::GroupPtr tp)
    : Layer(my_shard<Layer, Row>(full.weight(), Row ? 1 : 0, tp),
            Row ? Tensor() : my_shard<Layer, Row>(full.bias(), 0, tp), full.options()),
      tp_(std::move(tp)),
      sum_([group = tp_](const Tensor& t) { group->all_reduce(t, dist::ReduceOp::sum)->wait(); }) {
  if constexpr (std::is_same_v<Layer, Conv2d>) {
    DPT_CHECK(full.options().groups == 1)
        << layer_name<Layer, Row>() << ": splits ungrouped convolutions only, got groups "
        << full.options().groups;
  }
  if (Row && full.bias().defined()) bias_ = this->register_parameter("bias", full.bias().clone());
}

template <class Layer, bool Row>
Tensor TensorParallel<Layer, Row>::run(const Tensor& x, bool fuse_relu) {
  if (!Row) return Layer::run(copy_to_parallel_region(x, sum_), fuse_relu);
  Tensor y = add_bias(reduce_from_parallel_region(Layer::run(x, false), sum_), bias_);
  return fuse_relu ? relu(y) : y;
}

// "ColumnParallelLinear(784, 256, tp 2)": the unsplit layer's sizes and how many ranks share it.
template <class Layer, bool Row>
std::string TensorParallel<Layer, Row>::describe() const {
  const Tensor& w = this->weight();
  const int tp = tp_->size();
  std::string more;
  if constexpr (std::is_same_v<Layer, Conv2d>)
    more = ", kernel " + std::to_string(w.size(2)) + ", stride " + std::to_string(this->options().stride) +
           ", padding " + std::to_string(this->options().padding);
  return layer_name<Layer, Row>() + "(" + std::to_string(w.size(1) * (Row ? tp : 1)) + ", " +
         std::to_string(w.size(0) * (Row ? 1 : tp)) + more + ", tp " + std::to_string(tp) + ")";
}

template class TensorParallel<Linear, false>;
template class TensorParallel<Linear, true>;
template class TensorParallel<Conv2d, false>;
template class TensorParallel<Conv2d, true>;

}  // namespace dpt::nn
