// Host-to-device uploads that do not stall the host: the bytes go through a pinned staging
// block and are copied on the compute stream, ordered before the work queued after them
// (a graph replay that reads them). The staging block is rewritten only once its previous
// copy has run (an event), so the host stays free to queue up to one step ahead.
#pragma once

#include <cstddef>

#include "backend/cuda/stream.h"
#include "backend/kernels.h"

namespace dpt::cuda {

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

}  // namespace dpt::cuda
