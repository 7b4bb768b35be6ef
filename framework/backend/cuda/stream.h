// Thin RAII owners of a cudaStream_t and a cudaEvent_t. The per-device compute stream
// lives in context.h; the NCCL backend makes its own stream and orders it against compute
// with events (record on one stream, wait on the other).
#pragma once

#include <cuda_runtime.h>

namespace dpt::cuda {

class Event;

class Stream {
 public:
  // Creates a non-blocking stream on `device` (it does not synchronise with stream 0).
  explicit Stream(int device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  // Blocks the host until all work queued so far on this stream is done.
  void synchronize() const;
  // Work queued on this stream after this call starts after `event` has completed.
  void wait(const Event& event) const;

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

class Event {
 public:
  // Created on the current device (record it only on that device's streams); timing =
  // false makes a lighter event that can order streams but not be timed.
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  // Captures the work queued so far on `stream`.
  void record(const Stream& stream);
  void record(cudaStream_t stream);
  void synchronize() const;
  bool query() const;  // true when the recorded work is done
  // Milliseconds between `start` and this event; both need timing = true and to be done.
  float elapsed_ms(const Event& start) const;

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace dpt::cuda
