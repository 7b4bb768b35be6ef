// One worker thread per epoch fills a bounded queue in epoch order; next() takes from it.
// A worker is always joined before the loader's epoch state changes, so the index list
// needs no lock.
#include "datasets/loader.h"

#include <sys/prctl.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "datasets/shuffle.h"

namespace dpt::data {

Loader::Loader(const Dataset& dataset, LoaderOptions options)
    : dataset_(dataset), options_(std::move(options)) {
  dataset_check(dataset_);
  DPT_CHECK(options_.batch_size >= 1) << "loader: batch_size must be >= 1, got " << options_.batch_size;
  DPT_CHECK(options_.prefetch >= 1) << "loader: prefetch must be >= 1, got " << options_.prefetch;
  epoch_samples_ = dataset_.size();
}

Loader::~Loader() { worker_stop(); }

int64_t Loader::batch_count(int64_t samples) const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? samples / b : (samples + b - 1) / b;
}

void Loader::start_epoch(int64_t epoch) {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = shuffle_permutation(dataset_.size(), options_.seed, epoch);
  } else {
    order.resize(static_cast<size_t>(dataset_.size()));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  start_epoch(std::move(order), epoch);
}

void Loader::start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t first_batch) {
  for (size_t i = 0; i < indices.size(); ++i) {
    DPT_CHECK(indices[i] >= 0 && indices[i] < dataset_.size())
        << "loader: index " << indices[i] << " at position " << i
        << " of the epoch is out of range, expected 0.." << dataset_.size() - 1;
  }
  worker_stop();
  indices_ = std::move(indices);
  epoch_ = epoch;
  first_batch_ = first_batch;
  epoch_samples_ = static_cast<int64_t>(indices_.size());
  queue_.clear();
  done_ = false;
  stop_ = false;
  error_ = nullptr;
  started_ = true;
  worker_ = std::thread([this] { worker_main(); });
}

bool Loader::next(Batch& batch) {
  DPT_CHECK(started_) << "loader: next() called before start_epoch()";
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !queue_.empty() || done_; });
  if (!queue_.empty()) {
    batch = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    changed_.notify_all();
    return true;
  }
  if (error_) {
    std::exception_ptr error = std::exchange(error_, nullptr);
    std::rethrow_exception(error);
  }
  return false;
}

void Loader::worker_stop() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

void Loader::worker_main() {
  prctl(PR_SET_NAME, "dpt-loader", 0UL, 0UL, 0UL);  // as top -H and /proc name it
  try {
    const int64_t b = options_.batch_size;
    const int64_t batches = batch_count(epoch_samples_);
    for (int64_t i = 0; i < batches; ++i) {
      {
        // Wait for room first: at most `prefetch` batches wait in the queue.
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || static_cast<int64_t>(queue_.size()) < options_.prefetch; });
        if (stop_) return;
      }
      Batch batch = batch_make(indices_.data() + i * b, std::min(b, epoch_samples_ - i * b));
      if (options_.transform) options_.transform(batch, epoch_, first_batch_ + i);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) return;
        queue_.push_back(std::move(batch));
      }
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  changed_.notify_all();
}

Batch Loader::batch_make(const int64_t* indices, int64_t count) const {
  const Dataset& d = dataset_;
  Batch batch;
  batch.images = Tensor::empty({count, d.channels, d.height, d.width}, DType::f32);
  batch.labels = Tensor::empty({count}, DType::i64);
  float* images = batch.images.data<float>();
  int64_t* labels = batch.labels.data<int64_t>();
  const int64_t numel = d.sample_numel();
  for (int64_t i = 0; i < count; ++i) {
    dataset_sample_to_float(d, indices[i], images + i * numel);
    labels[i] = d.labels[indices[i]];
  }
  return batch;
}

}  // namespace dpt::data
