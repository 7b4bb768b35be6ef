// The Reducer: DDP's gradient buckets. Each parameter's .grad is a view into one flat
// bucket buffer; when the last gradient of a bucket has been accumulated (the autograd
// post-accumulate hook), the bucket's all-reduce starts at once, while backward goes on.
// Buckets launch in index order on every rank, so collectives match across ranks.
// With shard_gradients a bucket is reduce-scattered instead: each rank receives the average
// of its chunk of it alone (for the sharded optimizer, zero.h).
// A backward that throws waits for the all-reduces it had started before the error leaves
// backward() and starts none, so when every rank fails alike the ranks stay in step and the
// next step starts clean. A second backward after one forward is an error (its gradients
// would stay local): each forward has one synchronised backward, or runs under no_sync.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "parallel/ddp_options.h"
#include "comm/process_group.h"
#include "nn/module.h"

namespace dpt::dist {

// How a gradient bucket becomes the mean of every rank's (PyTorch's register_comm_hook):
// returns the Work of collectives on `group` after whose wait() `bucket` holds the average.
// Called on the thread that runs backward, bucket after bucket in the same order on every
// rank; every rank must use the same hook. The default all-reduces with ReduceOp::avg;
// DDP's distributed.compress: bf16 crosses hosts in bf16 (ddp.cpp).
using CommHook = std::function<WorkPtr(ProcessGroup& group, const Tensor& bucket)>;

struct BucketInfo {
  std::vector<std::string> params;  // in bucket order
  int64_t bytes = 0;
  int64_t numel = 0;
  std::vector<size_t> indices;   // the parameters' places in the Reducer's list, in bucket order
  std::vector<int64_t> offsets;  // where each one's gradient starts in the bucket, in elements
};

class Reducer {
 public:
  // Buckets are first filled in reverse registration order; after the first synchronised
  // backward they are rebuilt once in the order gradients actually arrived (rank 0's).
  // `options` are DDP's, of which the Reducer reads the bucket size, find_unused_parameters
  // and shard_gradients; `group` is DDP's.
  Reducer(nn::NamedTensors params, GroupPtr group, DdpOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Called before each forward whose backward must be synchronised (or not, under no_sync).
  // Throws Error if the last backward's all-reduces could not complete (a failed collective).
  // After a synchronised backward has ended, the next gradient before the next call is an
  // Error: a second backward since the last forward.
  void prepare_for_backward(bool synchronize);
  // `done` runs at the end of each synchronised backward that completed, after its buckets'
  // all-reduces (DDP finishes its buffer broadcast there).
  void set_backward_done(std::function<void()> done) { backward_done_ = std::move(done); }
  // Replaces how buckets are all-reduced (not with shard_gradients: those are
  // reduce-scattered). requires: no backward under way.
  void set_comm_hook(CommHook hook);
  const std::vector<BucketInfo>& buckets() const { return bucket_info_; }
  // With shard_gradients: this rank's chunk (chunk_of(numel, group size, group rank)) of
  // bucket b's averaged gradients, after each synchronised backward. The parameters' .grad
  // then hold this rank's own gradients outside that chunk, not averaged.
  const Tensor& shard(size_t b) const;
  // Milliseconds since prepare_for_backward at which each bucket's all-reduce was launched
  // in the last backward, and when the backward pass itself ended (for overlap checks).
  const std::vector<double>& launch_times_ms() const { return launch_ms_; }
  double backward_end_ms() const { return backward_end_ms_; }
  // The same clock: when this rank first saw each bucket's all-reduce complete — at a later
  // gradient's hook during backward (polled, an upper bound by at most one layer's backward)
  // or when its wait at the end of backward returned. For timelines.
  const std::vector<double>& completion_times_ms() const { return complete_ms_; }
  // prepare_for_backward's time, steady_clock nanoseconds since its epoch: the origin of
  // the times above.
  double origin_ns() const { return start_ns_; }
  // Time the last backward spent after its final node waiting for all-reduces: the
  // communication that backward did not hide.
  double exposed_wait_ms() const { return exposed_wait_ms_; }

 private:
  struct Bucket {
    Tensor flat;
    Tensor shard;                // with shard_gradients: this rank's chunk of the average
    std::vector<size_t> params;  // indices into params_
    int pending = 0;
    WorkPtr work;
  };

  void build_buckets(const std::vector<size_t>& order);
  void on_gradient_ready(size_t index);
  void launch_ready_buckets();
  void note_completions();
  // The end of a synchronised backward (the engine's final callback): launches what is
  // left, waits for every bucket, rebuilds once; after an error (`failed`), only waits for
  // the buckets already launched.
  void finish_backward(bool failed);

  nn::NamedTensors params_;
  GroupPtr group_;
  // The hooks stay on the parameters after the Reducer is gone; they reach it through
  // this slot, which the destructor empties.
  std::shared_ptr<Reducer*> self_;
  DdpOptions options_;
  CommHook hook_;  // null: all_reduce(avg)
  std::vector<Bucket> buckets_;
  std::vector<BucketInfo> bucket_info_;
  std::vector<size_t> bucket_of_;  // parameter -> bucket
  std::vector<bool> ready_;
  std::vector<size_t> arrival_order_;
  std::function<void()> backward_done_;
  size_t next_bucket_ = 0;
  // What a gradient arriving now is for: prepare_for_backward chooses `sync` or `local`
  // (no_sync), finish_backward sets `spent`, when a gradient means a second backward.
  enum class Expect { local, sync, spent };
  Expect expect_ = Expect::local;
  bool backward_open_ = false;  // from a synchronised backward's first gradient to its end
  bool rebuilt_ = false;
  double start_ns_ = 0;
  std::vector<double> launch_ms_;
  std::vector<double> complete_ms_;
  double backward_end_ms_ = 0;
  double exposed_wait_ms_ = 0;
};

}  // namespace dpt::dist
