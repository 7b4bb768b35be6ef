// Host-to-device copies through pinned staging memory that do not stall the host.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "backend/cuda/stream.h"
#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::cuda {

// Small uploads (a graphed step's inputs and scalars): the bytes go through a pinned staging
// block and are copied on the compute stream, ordered before the work queued after them (a
// graph replay that reads them). The staging block is rewritten only once its previous copy
// has run (an event), so the host stays free to queue up to one step ahead.
class Upload final : public dpt::Upload {
 public:
  // Staging for up to `capacity` bytes for copies to `device`. Requires a CUDA device.
  Upload(size_t capacity, int device);
  ~Upload() override;
  Upload(const Upload&) = delete;
  Upload& operator=(const Upload&) = delete;

  // Requires: bytes <= capacity, dst device memory on device(), no capture in progress
  // there (an upload changes what a graph reads; it is not part of the graph). Copies
  // `bytes` from host `src` (any host memory; free to reuse on return) to `dst`.
  void copy(void* dst, const void* src, size_t bytes) override;
  int device() const { return device_; }

 private:
  int device_;
  size_t capacity_;
  void* staging_;
  Event copied_;
};

// The data loader's batches, copied while compute is still busy with the step before: into
// pinned staging memory on the host, then by cudaMemcpyAsync on a copy stream of its own;
// the compute stream waits for that copy only when the batch is taken. Tensor::to(cuda)
// instead waits for everything queued on the device, every step.
class BatchUploader final : public dpt::BatchUploader {
 public:
  // Requires a valid device.
  explicit BatchUploader(int device);
  // Waits for its copies, then frees its staging memory.
  ~BatchUploader() override;
  BatchUploader(const BatchUploader&) = delete;
  BatchUploader& operator=(const BatchUploader&) = delete;

  // Requires: nothing pending; `host` dense CPU tensors (any dtype). Starts copying them
  // to the device and returns once they are in pinned memory (the host tensors may then
  // change). The device tensors come from the caching allocator; the copy stream first
  // waits for the work queued on the compute stream so far, which may still be using
  // those blocks.
  void start(const std::vector<Tensor>& host) override;
  bool pending() const override { return pending_; }
  // Requires pending(). Returns the device tensors of the upload (contiguous, shapes and
  // dtypes of `host`); work queued on the compute stream after this call sees them copied.
  std::vector<Tensor> take() override;
  // Forgets a pending upload (an epoch ended before its batch was needed).
  void drop() override;

 private:
  struct Staging {
    void* host = nullptr;  // pinned
    size_t capacity = 0;
    std::unique_ptr<Event> copied;  // the last copy out of `host`
    bool used = false;
  };

  int device_;
  Stream copy_stream_;
  std::unique_ptr<Event> compute_ready_;
  Staging staging_[2];  // alternate, so filling one never waits for the copy out of the other
  int next_ = 0;
  int pending_slot_ = 0;
  bool pending_ = false;
  std::vector<Tensor> tensors_;
};

}  // namespace dpt::cuda
