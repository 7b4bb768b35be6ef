// Upload and BatchUploader (see batch_upload.h).
#include "backend/cuda/batch_upload.h"

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

constexpr size_t kAlign = 256;  // each tensor's bytes start at a multiple of this in staging

size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

size_t bytes_of(const Tensor& t) { return static_cast<size_t>(t.numel()) * dtype_size(t.dtype()); }

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

BatchUploader::BatchUploader(int device) : device_(device), copy_stream_(device) {
  DeviceGuard guard(device);  // events belong to the device current at their creation
  compute_ready_ = std::make_unique<Event>();
  for (Staging& s : staging_) s.copied = std::make_unique<Event>();
}

BatchUploader::~BatchUploader() {
  // No throw from a destructor: a failure here means the context is already broken.
  try {
    drop();
    copy_stream_.synchronize();
    for (Staging& s : staging_) pinned_free(s.host);
  } catch (...) {
  }
}

void BatchUploader::start(const std::vector<Tensor>& host) {
  DPT_CHECK(!pending_) << "BatchUploader::start: the previous upload was not taken";
  size_t total = 0;
  for (const Tensor& t : host) {
    DPT_CHECK(t.device().is_cpu() && t.is_dense())
        << "BatchUploader::start: expected dense CPU tensors, got one on " << t.device().str();
    total += aligned(bytes_of(t));
  }
  Staging& s = staging_[next_];
  pending_slot_ = next_;
  next_ = 1 - next_;
  if (s.used) s.copied->synchronize();  // the copy out of it two uploads ago (long done)
  if (s.capacity < total) {
    pinned_free(s.host);
    s.host = nullptr;
    s.capacity = 0;
    s.host = pinned_alloc(total);
    s.capacity = total;
  }
  // A dense tensor's bytes are its elements in storage order; the device copy is made
  // contiguous, so a non-contiguous dense source (channels-last) goes through contiguous().
  std::vector<Tensor> sources;
  size_t offset = 0;
  for (const Tensor& t : host) {
    Tensor c = t.is_contiguous() ? t : t.contiguous();
    if (bytes_of(c)) std::memcpy(static_cast<char*>(s.host) + offset, c.raw_data(), bytes_of(c));
    offset += aligned(bytes_of(c));
    sources.push_back(c);
  }
  tensors_.clear();
  for (const Tensor& t : sources)
    tensors_.push_back(Tensor::empty(t.shape(), t.dtype(), Device::cuda(device_)));
  DeviceGuard guard(device_);
  // After the allocations: their blocks' earlier users (and a poison fill) are on compute.
  compute_ready_->record(compute_stream(device_));
  copy_stream_.wait(*compute_ready_);
  offset = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const size_t bytes = bytes_of(sources[i]);
    if (bytes)
      CUDA_CHECK(cudaMemcpyAsync(tensors_[i].raw_data(), static_cast<char*>(s.host) + offset, bytes,
                                 cudaMemcpyHostToDevice, copy_stream_.get()));
    offset += aligned(bytes);
  }
  s.copied->record(copy_stream_);
  s.used = true;
  pending_ = true;
}

std::vector<Tensor> BatchUploader::take() {
  DPT_CHECK(pending_) << "BatchUploader::take: nothing was started";
  DeviceGuard guard(device_);
  CUDA_CHECK(cudaStreamWaitEvent(compute_stream(device_), staging_[pending_slot_].copied->get(), 0));
  pending_ = false;
  return std::move(tensors_);
}

void BatchUploader::drop() {
  // The compute stream waits for the copy, so the blocks go back to the cache (whose next
  // users queue on compute) only after the copy stream is done writing them.
  if (pending_) take();
  tensors_.clear();
}

}  // namespace dpt::cuda
