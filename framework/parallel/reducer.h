// The Reducer: DDP's gradient buckets. Each parameter's .grad is a view into a flat bucket;
// when a bucket's last gradient is accumulated (the post-accumulate hook) its all-reduce
// starts while backward goes on, buckets in index order on every rank. With
// shard_gradients a bucket is reduce-scattered instead (for zero.h). A backward that throws
// waits for the all-reduces it started and starts none, so the next step starts clean. A
// second backward after one forward is an error (its gradients would stay local).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "parallel/ddp_options.h"
#include "comm/process_group.h"
#include "nn/module.h"

namespace dpt::dist {

// How a gradient bucket becomes the mean of every rank's (PyTorch's register_comm_hook):
// returns the Work after whose wait() `bucket` holds the average. Called on the backward
// thread, bucket after bucket in the same order on every rank, which all use the same hook.
using CommHook = std::function<WorkPtr(ProcessGroup& group, const Tensor& bucket)>;

struct BucketInfo {
  std::vector<std::string> params;  // in bucket order
  int64_t numel = 0;
  int64_t bytes() const { return numel * 4; }  // f32
  std::vector<size_t> indices;   // the parameters' places in the Reducer's list, in bucket order
  std::vector<int64_t> offsets;  // where each one's gradient starts in the bucket, in elements
};

class Reducer {
 public:
  // Buckets are first filled in reverse registration order; after the first synchronised
  // backward they are rebuilt once in the order gradients actually arrived (rank 0's).
  Reducer(nn::NamedTensors params, GroupPtr group, DdpOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Called before each forward whose backward must be synchronised (or not, under no_sync).
  // Throws Error if the last backward's all-reduces could not complete (a failed collective).
  // After a synchronised backward has ended, the next gradient before the next call is an
  // Error: a second backward since the last forward.
  void prepare_for_backward(bool synchronize);
  // Runs at the end of each completed synchronised backward, after its buckets' all-reduces.
  void set_backward_done(std::function<void()> done) { backward_done_ = std::move(done); }
  // Replaces how buckets are all-reduced (not with shard_gradients: those are
  // reduce-scattered). requires: no backward under way.
  void set_comm_hook(CommHook hook);
  const std::vector<BucketInfo>& buckets() const { return bucket_info_; }
  // With shard_gradients: this rank's chunk (chunk_of(numel, group size, group rank)) of
  // bucket b's averaged gradients, after each synchronised backward. The parameters' .grad
  // then hold this rank's own gradients outside that chunk, not averaged.
  const Tensor& shard(size_t b) const;
  // The last backward's timeline, in ms since prepare_for_backward (origin_ns, steady_clock
  // ns): each bucket's launch; the backward pass's end; when this rank first saw each
  // bucket complete (polled at later hooks, or its final wait); and the exposed wait after
  // the final node, the communication backward did not hide.
  const std::vector<double>& launch_times_ms() const { return launch_ms_; }
  double backward_end_ms() const { return backward_end_ms_; }
  const std::vector<double>& completion_times_ms() const { return complete_ms_; }
  double origin_ns() const { return start_ns_; }
  double exposed_wait_ms() const { return exposed_wait_ms_; }

 private:
  struct Bucket {
    Tensor flat;
    Tensor shard;     // with shard_gradients: this rank's chunk of the average
    int pending = 0;  // its parameters (bucket_info_'s indices) not yet ready
    WorkPtr work;
  };

  void build_buckets(const std::vector<size_t>& order);
  void on_gradient_ready(size_t index);
  void launch_ready_buckets();
  void note_completions();
  // The engine's final callback: launches what is left, waits, rebuilds once; after an
  // error only waits for the buckets already launched.
  void finish_backward(bool failed);

  nn::NamedTensors params_;
  GroupPtr group_;
  // The hooks outlive the Reducer; they reach it through this slot, emptied by ~Reducer.
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
  // What an arriving gradient is for: `local` under no_sync; `spent` means a second backward.
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
