// Stream and Event: create, destroy, and the few operations the backends order work with.
#include "backend/cuda/stream.h"

#include "backend/cuda/check.h"
#include "backend/cuda/device.h"

namespace dpt::cuda {

Stream::Stream(int device) : device_(device) {
  DeviceGuard guard(device);
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Stream::~Stream() {
  if (stream_) (void)cudaStreamDestroy(stream_);  // no throw from a destructor
}

void Stream::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void Stream::wait(const Event& event) const { CUDA_CHECK(cudaStreamWaitEvent(stream_, event.get(), 0)); }

Event::Event(bool timing) {
  CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_) (void)cudaEventDestroy(event_);
}

void Event::record(const Stream& stream) { record(stream.get()); }

void Event::record(cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(event_, stream)); }

void Event::synchronize() const { CUDA_CHECK(cudaEventSynchronize(event_)); }

bool Event::query() const {
  cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  CUDA_CHECK(status);
  return true;
}

float Event::elapsed_ms(const Event& start) const {
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), event_));
  return ms;
}

}  // namespace dpt::cuda
