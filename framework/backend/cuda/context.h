// The per-device state every CUDA kernel needs: the compute stream and the cuBLAS and
// cuDNN handles bound to it. One per device, made on first use and kept for the process
// (the STYLE rule: handles belong to a device context, never to a layer).
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include <memory>
#include <mutex>

#include "backend/cuda/stream.h"

namespace dpt::cuda {

class DeviceContext {
 public:
  explicit DeviceContext(int device);  // creates the stream; handles come on first use
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  // All ops and copies on this device are queued here, so they run in program order.
  const Stream& stream() const { return stream_; }
  // Bound to stream(). The caller must have made device() current before using them.
  cublasHandle_t cublas();
  cudnnHandle_t cudnn();

 private:
  int device_;
  Stream stream_;
  std::once_flag cublas_once_, cudnn_once_;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
};

// The context of device `index`; throws dpt::Error for an invalid index or no device.
// Thread-safe. Contexts are never destroyed: the driver reclaims them at exit, and
// destroying handles from static destructors races the CUDA runtime's own shutdown.
DeviceContext& device_context(int index);
// Shorthand for device_context(index).stream().get().
cudaStream_t compute_stream(int index);

}  // namespace dpt::cuda
