// CUDA's kernel table, registered at load time (registering only stores a pointer: a
// machine without a GPU loads libdpt fine): the kernels of backend/cuda, its uploads,
// graphs and batch staging.
#include "backend/kernels.h"

#include "backend/cuda/batch_upload.h"
#include "backend/cuda/graph.h"
#include "backend/cuda/kernels.h"

namespace dpt::cuda {
namespace {

std::unique_ptr<dpt::Upload> upload_make(size_t capacity, int device) {
  return std::make_unique<Upload>(capacity, device);
}

std::unique_ptr<dpt::BatchUploader> batch_uploader_make(int device) {
  return std::make_unique<BatchUploader>(device);
}

std::unique_ptr<StepGraph> step_graph_make(int device, int warmup, std::function<void()> step) {
  return std::make_unique<GraphedStep>(device, warmup, std::move(step));
}

const Kernels kTable = {
    .name = "CUDA",
    .bf16 = true,
    .capturing = capture_active,
    .copy = cast_copy,
    .upload_make = upload_make,
    .batch_uploader_make = batch_uploader_make,
    .step_graph_make = step_graph_make,
#define DPT_KERNEL(ret, name, params) .name = name,
#include "backend/kernel_list.h"
};

[[maybe_unused]] const bool registered = [] {
  kernels_register(DeviceType::cuda, &kTable);
  return true;
}();

}  // namespace
}  // namespace dpt::cuda
