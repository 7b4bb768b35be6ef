// Lazily made per-device contexts. cublasCreate and cudnnCreate cost tens to hundreds of
// milliseconds and some memory each, so they are made once per device, when first asked for.
#include "backend/cuda/context.h"

#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/check.h"
#include "backend/cuda/device.h"

namespace dpt::cuda {

DeviceContext::DeviceContext(int device) : device_(device), stream_(device) {}

cublasHandle_t DeviceContext::cublas() {
  std::call_once(cublas_once_, [this] {
    DeviceGuard guard(device_);
    CUBLAS_CHECK(cublasCreate(&cublas_));
    CUBLAS_CHECK(cublasSetStream(cublas_, stream_.get()));
    // An explicit workspace (after cublasSetStream, which resets it): cuBLAS then never
    // allocates one of its own inside a CUDA graph capture. 32 MiB is what cuBLAS asks for
    // on Hopper; the block lives as long as the handle.
    constexpr size_t kWorkspaceBytes = size_t{32} << 20;
    CUBLAS_CHECK(cublasSetWorkspace(cublas_, device_alloc(kWorkspaceBytes, device_), kWorkspaceBytes));
  });
  return cublas_;
}

cudnnHandle_t DeviceContext::cudnn() {
  std::call_once(cudnn_once_, [this] {
    DeviceGuard guard(device_);
    CUDNN_CHECK(cudnnCreate(&cudnn_));
    CUDNN_CHECK(cudnnSetStream(cudnn_, stream_.get()));
  });
  return cudnn_;
}

DeviceContext& device_context(int index) {
  cuda_check_device(index);
  static std::mutex mutex;
  // Leaked on purpose (see context.h); sized once, slots filled on first use.
  static auto* contexts = new std::vector<std::unique_ptr<DeviceContext>>(cuda_device_count());
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*contexts)[index];
  if (!slot) slot = std::make_unique<DeviceContext>(index);
  return *slot;
}

cudaStream_t compute_stream(int index) { return device_context(index).stream().get(); }

}  // namespace dpt::cuda
