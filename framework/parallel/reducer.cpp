#include "parallel/reducer.h"

#include <algorithm>
#include <chrono>

#include "autograd/node.h"

namespace dpt::dist {
namespace {

// The first bucket's size (at most the cap): small, so that its all-reduce starts early.
constexpr double kFirstBucketMb = 1.0;

double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Reducer::Reducer(nn::NamedTensors params, GroupPtr group, DdpOptions options)
    : params_(std::move(params)),
      group_(std::move(group)),
      options_(options),
      ready_(params_.size(), false),
      rebuilt_(options.shard_gradients) {
  std::vector<size_t> reverse(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) reverse[i] = params_.size() - 1 - i;
  build_buckets(reverse);
  self_ = std::make_shared<Reducer*>(this);
  for (size_t i = 0; i < params_.size(); ++i)
    autograd::add_post_accumulate_hook(params_[i].second, [slot = self_, i](const Tensor&) {
      if (*slot) (*slot)->on_gradient_ready(i);
    });
}

Reducer::~Reducer() { *self_ = nullptr; }

void Reducer::build_buckets(const std::vector<size_t>& order) {
  // Keep the gradients accumulated so far: they move into the new buckets.
  std::vector<Tensor> old_grads(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].second.grad().defined()) old_grads[i] = params_[i].second.grad().clone();

  buckets_.clear();
  bucket_info_.clear();
  bucket_of_.assign(params_.size(), 0);
  BucketInfo info;
  // Lays the parameters collected in `info` out as views of a new bucket.
  auto close = [&] {
    if (info.indices.empty()) return;
    Bucket bucket;
    // On the parameters' device (CUDA buckets go to the group's NCCL backend), in memory the
    // group all-reduces fastest (shared by the ranks of one machine: no copies).
    bucket.flat =
        group_->collective_buffer(info.numel, DType::f32, params_[info.indices.front()].second.device());
    int64_t offset = 0;
    for (size_t i : info.indices) {
      const Tensor& p = params_[i].second;
      Tensor view = bucket.flat.as_strided(p.shape(), shape_contiguous_strides(p.shape()), offset);
      if (old_grads[i].defined()) view.copy_from(old_grads[i]);
      p.set_grad(view);
      bucket_of_[i] = buckets_.size();
      info.params.push_back(params_[i].first);
      info.offsets.push_back(offset);
      offset += p.numel();
    }
    if (options_.shard_gradients) {
      const Chunk mine = chunk_of(info.numel, group_->size(), group_->rank());
      bucket.shard = Tensor::zeros({mine.end - mine.begin}, DType::f32, bucket.flat.device());
    }
    buckets_.push_back(std::move(bucket));
    bucket_info_.push_back(std::move(info));
    info = BucketInfo();
  };
  for (size_t index : order) {
    info.indices.push_back(index);
    info.numel += params_[index].second.numel();
    const double cap_mb =
        buckets_.empty() ? std::min(kFirstBucketMb, options_.bucket_cap_mb) : options_.bucket_cap_mb;
    if (options_.bucket_cap_mb == 0 || static_cast<double>(info.bytes()) >= cap_mb * 1024.0 * 1024.0) close();
  }
  close();
}

const Tensor& Reducer::shard(size_t b) const {
  DPT_CHECK(options_.shard_gradients)
      << "DDP on " << group_->name() << ": gradients are all-reduced, not sharded";
  return buckets_.at(b).shard;
}

void Reducer::prepare_for_backward(bool synchronize) {
  DPT_CHECK(!backward_open_) << "DDP on " << group_->name()
                             << ": the previous backward's gradient all-reduces did not complete (see the error "
                                "that backward threw); the group cannot be used after a failed collective";
  expect_ = synchronize ? Expect::sync : Expect::local;
  std::fill(ready_.begin(), ready_.end(), false);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].pending = static_cast<int>(bucket_info_[b].indices.size());
    buckets_[b].work.reset();
  }
  next_bucket_ = 0;
  launch_ms_.clear();
  complete_ms_.clear();
  start_ns_ = now_ns();
}

void Reducer::on_gradient_ready(size_t index) {
  if (expect_ == Expect::local) return;  // no_sync: gradients only accumulate locally
  // Left alone, these gradients would part the replicas. Every rank stops here alike,
  // before any collective of this backward.
  DPT_CHECK(expect_ == Expect::sync)
      << "DDP on " << group_->name() << ": a second backward since the last forward (its gradients would "
      << "not be all-reduced, and the replicas would part); run one forward per backward, or accumulate "
         "gradients with every forward but the last under no_sync()";
  DPT_CHECK(!ready_[index]) << "DDP: parameter '" << params_[index].first
                            << "' received two gradients in one backward pass";
  if (!backward_open_) {
    backward_open_ = true;
    autograd::queue_callback([this](bool failed) { finish_backward(failed); });
  }
  ready_[index] = true;
  if (!rebuilt_) arrival_order_.push_back(index);
  --buckets_[bucket_of_[index]].pending;
  // With find_unused_parameters the moment a bucket fills may differ by rank, and its
  // launch could pair up wrongly with backward's other collectives (sync_bn): every bucket
  // launches when backward ends instead, overlap given up.
  if (options_.find_unused_parameters) return;
  note_completions();
  launch_ready_buckets();
}

void Reducer::set_comm_hook(CommHook hook) {
  DPT_CHECK(!backward_open_) << "DDP on " << group_->name() << ": set_comm_hook during a backward";
  DPT_CHECK(!options_.shard_gradients) << "DDP on " << group_->name()
                                       << ": a comm hook all-reduces buckets, but gradients are sharded "
                                          "(reduce-scattered for the sharded optimizer)";
  hook_ = std::move(hook);
}

void Reducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& bucket = buckets_[next_bucket_];
    // may throw (debug: collectives)
    bucket.work = options_.shard_gradients ? group_->reduce_scatter(bucket.shard, bucket.flat, ReduceOp::avg)
                  : hook_                  ? hook_(*group_, bucket.flat)
                                           : group_->all_reduce(bucket.flat, ReduceOp::avg);
    ++next_bucket_;
    launch_ms_.push_back((now_ns() - start_ns_) / 1e6);
  }
}

// Buckets complete in launch order: look at the first one not yet seen complete, and on.
void Reducer::note_completions() {
  while (complete_ms_.size() < next_bucket_ && buckets_[complete_ms_.size()].work->is_completed())
    complete_ms_.push_back((now_ns() - start_ns_) / 1e6);
}

void Reducer::finish_backward(bool failed) {
  expect_ = Expect::spent;
  backward_end_ms_ = (now_ns() - start_ns_) / 1e6;
  if (failed) {
    // After an error nothing new starts (another rank may be gone); those started are
    // waited for, so none writes into the gradients later.
    for (size_t b = 0; b < next_bucket_; ++b) buckets_[b].work->wait();
    if (!rebuilt_) arrival_order_.clear();
    backward_open_ = false;
    return;
  }
  // A parameter without a gradient counts as zero; every bucket still launches, also
  // before the unused-parameter error below.
  std::string unused;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) {
      unused += (unused.empty() ? "'" : ", '") + params_[i].first + "'";
      --buckets_[bucket_of_[i]].pending;
      ready_[i] = true;
    }
  launch_ready_buckets();
  note_completions();
  for (size_t b = complete_ms_.size(); b < buckets_.size(); ++b) {
    buckets_[b].work->wait();
    complete_ms_.push_back((now_ns() - start_ns_) / 1e6);
  }
  if (backward_done_) backward_done_();  // its wait, if any, is exposed communication too
  exposed_wait_ms_ = (now_ns() - start_ns_) / 1e6 - backward_end_ms_;

  if (!rebuilt_) {
    // Rebuild once in rank 0's arrival order, so the first buckets are the first ready.
    rebuilt_ = true;
    std::vector<int64_t> order(arrival_order_.begin(), arrival_order_.end());
    for (size_t i = params_.size(); i-- > 0;)
      if (std::find(arrival_order_.begin(), arrival_order_.end(), i) == arrival_order_.end())
        order.push_back(static_cast<int64_t>(i));
    Tensor t = Tensor::from_vector(order, {static_cast<int64_t>(order.size())});
    group_->broadcast(t, 0)->wait();
    const int64_t* o = t.data<int64_t>();
    build_buckets(std::vector<size_t>(o, o + t.numel()));
  }
  backward_open_ = false;
  if (!unused.empty() && !options_.find_unused_parameters)
    DPT_FAIL() << "DDP on " << group_->name() << ": parameters got no gradient in this backward: " << unused
               << " (set distributed.find_unused_parameters: true if they are unused on purpose)";
}

}  // namespace dpt::dist
