// Batches for the training loop, prepared on a background thread so that converting and
// normalising pixels overlaps compute. An epoch is an ordered list of sample indices:
// the whole dataset shuffled from (seed, epoch), or a list the caller hands in (a
// distributed sampler's shard).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "datasets/dataset.h"

namespace dpt::data {

struct Batch {
  Tensor images;  // f32 [B, C, H, W], contiguous, CPU, normalised
  Tensor labels;  // i64 [B]
};

struct LoaderOptions {
  int64_t batch_size = 128;
  bool shuffle = true;    // start_epoch(epoch) permutes; ignored for explicit indices
  bool drop_last = true;  // true for training; false for evaluation, so every sample counts
  uint64_t seed = 0;
  int64_t prefetch = 2;  // batches prepared ahead of the consumer, >= 1
  // Runs on the worker thread on each finished batch (augmentation plugs in here); an
  // exception it throws comes out of next().
  // Called with the epoch given to start_epoch and the batch's index in that epoch, so a
  // random transform can draw from (seed, epoch, batch) whatever the thread timing.
  std::function<void(Batch&, int64_t epoch, int64_t batch_index)> transform = nullptr;
};

class Loader {
 public:
  // Keeps a reference to `dataset`, which must outlive the loader.
  // Requires: dataset_check(dataset) passes, batch_size >= 1, prefetch >= 1.
  Loader(const Dataset& dataset, LoaderOptions options);
  // Stops and joins the worker, also in the middle of an epoch.
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts an epoch over the whole dataset, permuted by shuffle_permutation(size, seed,
  // epoch) when options.shuffle, else in order. Abandons any epoch in progress.
  void start_epoch(int64_t epoch);
  // Starts epoch `epoch` over exactly these sample indices, in this order. The transform
  // sees batch indices from `first_batch` on (a resumed epoch continues its numbering).
  // Requires: each index in [0, dataset.size()).
  void start_epoch(std::vector<int64_t> indices, int64_t epoch = 0, int64_t first_batch = 0);

  // Fills `batch` with the next batch of the epoch and returns true, or returns false at
  // the end of the epoch. Rethrows an exception raised on the worker thread.
  // Requires: start_epoch was called.
  bool next(Batch& batch);

  // Batches in the current epoch (the whole dataset before the first start_epoch).
  int64_t batches_per_epoch() const { return batch_count(epoch_samples_); }
  // Batches for `samples` samples under this loader's batch_size and drop_last.
  int64_t batch_count(int64_t samples) const;

  const Dataset& dataset() const { return dataset_; }
  const LoaderOptions& options() const { return options_; }

 private:
  void worker_main();
  void worker_stop();
  Batch batch_make(const int64_t* indices, int64_t count) const;

  const Dataset& dataset_;
  LoaderOptions options_;
  std::vector<int64_t> indices_;  // the epoch's order; read by the worker, written only when it is stopped
  int64_t epoch_samples_ = 0;
  int64_t epoch_ = 0;
  int64_t first_batch_ = 0;
  bool started_ = false;

  std::mutex mutex_;
  std::condition_variable changed_;  // queue grew or shrank, the worker finished, or stop was asked
  std::deque<Batch> queue_;
  bool done_ = false;  // the worker has produced its last batch (or failed)
  bool stop_ = false;  // the worker must return as soon as it can
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace dpt::data
