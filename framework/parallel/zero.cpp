#include "parallel/zero.h"

#include <algorithm>
#include <map>

#include "autograd/node.h"

namespace dpt::dist {
namespace {

// 1-D view of elements [begin, begin + length) of a contiguous tensor.
Tensor flat_range(const Tensor& t, int64_t begin, int64_t length) {
  return t.as_strided({length}, {1}, t.offset() + begin);
}

// Makes `param` (the same TensorImpl, seen by the model, DDP and the optimizer) a view of
// `flat` from element `offset`, values kept, as Module::to moves a tensor.
void param_move_into(const Tensor& param, const Tensor& flat, int64_t offset) {
  const Shape strides = shape_contiguous_strides(param.shape());
  flat.as_strided(param.shape(), strides, flat.offset() + offset).copy_from(param);
  TensorImpl* impl = param.impl();
  impl->storage = flat.storage();
  impl->offset = flat.offset() + offset;
  impl->strides = strides;
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(DistributedDataParallel& ddp, std::vector<optim::ParamGroup> groups,
                             const MakeOptimizer& make)
    : Optimizer(std::move(groups)),
      group_(ddp.group()),
      module_(ddp.module()),
      reducer_(ddp.reducer()),
      params_(ddp.module().named_parameters()) {
  DPT_CHECK(ddp.options().shard_gradients) << "ZeroOptimizer on " << group_->name()
                                           << ": DDP all-reduces its gradients; make it with "
                                              "DdpOptions::shard_gradients, so that it reduce-scatters them";
  // Which group each parameter is in (none: not updated, as an unsharded optimizer skips it).
  std::map<const TensorImpl*, size_t> index_of;
  for (size_t i = 0; i < params_.size(); ++i) index_of.emplace(params_[i].second.impl(), i);
  std::vector<int> group_of(params_.size(), -1);
  for (size_t g = 0; g < groups_.size(); ++g) {
    group_params_.emplace_back();
    for (const Tensor& p : groups_[g].params) {
      auto it = index_of.find(p.impl());
      DPT_CHECK(it != index_of.end()) << "ZeroOptimizer: a parameter of shape " << shape_str(p.shape())
                                      << " in group " << g << " is not one of the DDP module's";
      DPT_CHECK(group_of[it->second] < 0)
          << "ZeroOptimizer: parameter '" << params_[it->second].first << "' is in two groups";
      group_of[it->second] = static_cast<int>(g);
      group_params_.back().push_back(it->second);
    }
  }

  autograd::NoGrad no_grad;
  std::vector<std::vector<Segment>> by_group(groups_.size());
  const auto& layout = reducer_.buckets();
  for (size_t b = 0; b < layout.size(); ++b) {
    const BucketInfo& info = layout[b];
    const Tensor& first = params_[info.indices.front()].second;
    FlatBucket bucket{group_->collective_buffer(info.numel, DType::f32, first.device()),
                      chunk_of(info.numel, group_->size(), group_->rank())};
    for (size_t k = 0; k < info.indices.size(); ++k) {
      const size_t i = info.indices[k];
      const int64_t offset = info.offsets[k], numel = params_[i].second.numel();
      param_move_into(params_[i].second, bucket.params, offset);
      const int64_t begin = std::max(offset, bucket.mine.begin),
                    end = std::min(offset + numel, bucket.mine.end);
      if (begin < end && group_of[i] >= 0)
        by_group[group_of[i]].push_back({b, i, begin - offset, end - begin, begin - bucket.mine.begin});
    }
    buckets_.push_back(std::move(bucket));
  }

  // The rule sees each segment as a 1-D parameter whose gradient is the same elements of
  // the reduce-scattered chunk, in the segment's original group.
  std::vector<optim::ParamGroup> shard_groups;
  for (size_t g = 0; g < groups_.size(); ++g) {
    optim::ParamGroup shard{{}, groups_[g].weight_decay};
    for (const Segment& s : by_group[g]) {
      const Tensor& chunk = reducer_.shard(s.bucket);
      Tensor view =
          flat_range(buckets_[s.bucket].params, buckets_[s.bucket].mine.begin + s.chunk_offset, s.length);
      view.set_grad(flat_range(chunk, s.chunk_offset, s.length));
      shard.params.push_back(view);
      segments_.push_back(s);
    }
    shard_groups.push_back(std::move(shard));
  }
  rule_ = make(std::move(shard_groups));
  gathers_.resize(buckets_.size());
}

ZeroOptimizer::~ZeroOptimizer() {
  if (gather_during_forward_)
    for (nn::Module* m : module_.modules()) m->set_before_forward(nullptr);
  try {
    parameters_ready();
  } catch (const std::exception&) {
    // A failed gather has already been reported by whoever waited first, or the group is gone.
  }
}

bool ZeroOptimizer::gather_during_forward() {
  std::map<const TensorImpl*, size_t> bucket_of;
  for (size_t b = 0; b < reducer_.buckets().size(); ++b)
    for (size_t i : reducer_.buckets()[b].indices) bucket_of.emplace(params_[i].second.impl(), b);
  std::vector<std::pair<nn::Module*, std::vector<size_t>>> hooks;
  for (nn::Module* m : module_.modules()) {
    std::vector<size_t> buckets;
    for (const auto& [name, p] : m->own_parameters()) {
      auto it = bucket_of.find(p.impl());
      if (it != bucket_of.end() && std::find(buckets.begin(), buckets.end(), it->second) == buckets.end())
        buckets.push_back(it->second);
    }
    if (buckets.empty()) continue;
    if (!m->calls_before_forward()) return false;  // it would read parameters still in flight
    hooks.emplace_back(m, std::move(buckets));
  }
  for (auto& [m, buckets] : hooks)
    m->set_before_forward([this, buckets = std::move(buckets)] {
      for (size_t b : buckets) gather_wait(b);
    });
  gather_during_forward_ = true;
  return true;
}

void ZeroOptimizer::gather_wait(size_t b) {
  if (!gathers_[b]) return;
  const WorkPtr work = std::move(gathers_[b]);  // leaves the slot empty
  work->wait();
  // The other ranks' elements changed too: copies made from the parameters (bf16) are stale.
  buckets_[b].params.storage()->bump_version();
}

void ZeroOptimizer::parameters_ready() {
  for (size_t b = buckets_.size(); b-- > 0;) gather_wait(b);
}

int ZeroOptimizer::gathers_pending() const {
  return static_cast<int>(
      std::count_if(gathers_.begin(), gathers_.end(), [](const WorkPtr& w) { return !!w; }));
}

void ZeroOptimizer::step(float lr) {
  parameters_ready();  // a forward has normally waited for every bucket already
  rule_->step(lr);
  // Forward order (the last bucket holds the first layers), each in place from this rank's chunk.
  for (size_t b = buckets_.size(); b-- > 0;) {
    const FlatBucket& bucket = buckets_[b];
    gathers_[b] = group_->all_gather(
        bucket.params, flat_range(bucket.params, bucket.mine.begin, bucket.mine.end - bucket.mine.begin));
  }
  if (!gather_during_forward_) parameters_ready();
}

void ZeroOptimizer::step_prepare(float) {
  DPT_FAIL() << "ZeroOptimizer: CUDA graphs (step_prepare / step_apply) are not supported; the sharded "
                "optimizer's step all-gathers the parameters";
}

std::vector<optim::Optimizer::StateTensor> ZeroOptimizer::segment_state() const {
  const size_t kinds = state_kinds().size();
  std::vector<StateTensor> state = rule_->state_tensors();
  DPT_CHECK(state.size() == segments_.size() * kinds)
      << "ZeroOptimizer: the rule lists " << state.size() << " state tensors for " << segments_.size()
      << " shard segments of " << kinds << " kinds each";
  return state;
}

std::vector<optim::Optimizer::StateTensor> ZeroOptimizer::state_for_save() {
  parameters_ready();  // the checkpoint's model is read after this
  autograd::NoGrad no_grad;
  const std::vector<std::string> kinds = state_kinds();
  const std::vector<StateTensor> state = segment_state();
  const bool root = group_->rank() == 0;
  // whole[param][kind], on root: views of each bucket's gathered state.
  std::vector<std::vector<Tensor>> whole(params_.size(), std::vector<Tensor>(kinds.size()));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Chunk mine = buckets_[b].mine;
    const BucketInfo& info = reducer_.buckets()[b];
    for (size_t k = 0; k < kinds.size(); ++k) {
      // Laid out as the bucket: the all-gather, in place, puts every rank's chunk where it belongs.
      Tensor flat = Tensor::zeros({info.numel}, DType::f32, buckets_[b].params.device());
      for (size_t s = 0; s < segments_.size(); ++s)
        if (segments_[s].bucket == b)
          flat_range(flat, mine.begin + segments_[s].chunk_offset, segments_[s].length)
              .copy_from(state[s * kinds.size() + k].value);
      group_->all_gather(flat, flat_range(flat, mine.begin, mine.end - mine.begin))->wait();
      if (!root) continue;
      for (size_t j = 0; j < info.indices.size(); ++j) {
        const Tensor& p = params_[info.indices[j]].second;
        whole[info.indices[j]][k] =
            flat.as_strided(p.shape(), shape_contiguous_strides(p.shape()), info.offsets[j]);
      }
    }
  }
  std::vector<StateTensor> out;
  if (!root) return out;
  for (const auto& indices : group_params_)
    for (size_t i : indices)
      for (size_t k = 0; k < kinds.size(); ++k) out.push_back({kinds[k], params_[i].second, whole[i][k]});
  return out;
}

std::vector<optim::Optimizer::StateTensor> ZeroOptimizer::state_for_load() {
  parameters_ready();  // a gather in flight would overwrite the loaded parameters
  const std::vector<std::string> kinds = state_kinds();
  loading_.assign(params_.size(), {});
  std::vector<StateTensor> out;
  for (const auto& indices : group_params_)
    for (size_t i : indices)
      for (const std::string& kind : kinds) {
        loading_[i].push_back(Tensor::zeros(params_[i].second.shape()));
        out.push_back({kind, params_[i].second, loading_[i].back()});
      }
  return out;
}

void ZeroOptimizer::state_loaded() {
  DPT_CHECK(loading_.size() == params_.size()) << "ZeroOptimizer: state_loaded() without state_for_load()";
  autograd::NoGrad no_grad;
  const std::vector<StateTensor> state = segment_state();
  const size_t kinds = state_kinds().size();
  for (size_t s = 0; s < segments_.size(); ++s)
    for (size_t k = 0; k < kinds; ++k)
      state[s * kinds + k].value.copy_from(
          flat_range(loading_.at(segments_[s].param).at(k), segments_[s].begin, segments_[s].length));
  loading_.clear();
}

std::vector<Tensor> ZeroOptimizer::step_gradients() const {
  std::vector<Tensor> chunks;
  for (size_t b = 0; b < buckets_.size(); ++b) chunks.push_back(reducer_.shard(b));
  return chunks;
}

bool ZeroOptimizer::all_ranks(bool ok) const {
  Tensor flag = Tensor::from_vector(std::vector<int64_t>{ok ? 1 : 0}, {1});
  group_->all_reduce(flag, ReduceOp::min)->wait();
  return flag.data<int64_t>()[0] == 1;
}

}  // namespace dpt::dist
