#include "backend/cuda/upload.h"

#include <cstring>

#include "backend/cuda/allocator.h"
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device.h"
#include "backend/cuda/graph.h"
#include "core/error.h"

namespace dpt::cuda {
namespace {

// The event is made on the device the copies run on (Event's rule).
Event event_on(int device) {
  DeviceGuard guard(device);
  return Event();
}

}  // namespace

Upload::Upload(size_t capacity, int device)
    : device_(device), capacity_(capacity), staging_(pinned_alloc(capacity)), copied_(event_on(device)) {}

Upload::~Upload() {
  // The last copy may still read the staging block: it returns to the cache only after.
  (void)cudaEventSynchronize(copied_.get());
  try {
    pinned_free(staging_);
  } catch (...) {
  }
}

void Upload::copy(void* dst, const void* src, size_t bytes) {
  DPT_CHECK(bytes <= capacity_) << "upload of " << bytes << " bytes into a staging block of " << capacity_;
  if (bytes == 0) return;
  DeviceGuard guard(device_);
  DPT_CHECK(!capture_active(device_))
      << "upload to cuda:" << device_ << " during a CUDA graph capture: uploads belong before a replay";
  copied_.synchronize();  // the previous copy out of the staging block has run
  std::memcpy(staging_, src, bytes);
  cudaStream_t stream = compute_stream(device_);
  CUDA_CHECK(cudaMemcpyAsync(dst, staging_, bytes, cudaMemcpyHostToDevice, stream));
  copied_.record(stream);
}

}  // namespace dpt::cuda
