// Host-to-device copies of the data loader's batches that overlap compute. A batch is
// copied into pinned staging memory on the host, then by cudaMemcpyAsync on a copy stream
// of its own, while the compute stream is still busy with the step before; the compute
// stream waits for that copy only when the batch is taken. Tensor::to(cuda) instead waits
// for everything queued on the device, every step.
#pragma once

#include <memory>
#include <vector>

#include "backend/cuda/stream.h"
#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::cuda {

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
