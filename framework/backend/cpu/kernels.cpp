// The CPU's kernel table: the kernels of backend/cpu (kernels.h).
#include "backend/cpu/kernels.h"

#include <cstring>

namespace dpt::cpu {
namespace {

// Host memory is the device's: an upload is a copy.
class HostUpload final : public Upload {
 public:
  void copy(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};

void copy(const Tensor& src, const Tensor& dst) {
  DPT_CHECK(src.dtype() == dst.dtype())
      << "copy on the CPU: no dtype conversion (the CPU kernels are f32), got " << dtype_name(src.dtype())
      << " to " << dtype_name(dst.dtype());
  dst.copy_from(src);
}

const Kernels kTable = {
    .name = "CPU",
    .bf16 = false,
    .capturing = [](int) { return false; },
    .copy = copy,
    .upload_make = [](size_t, int) -> std::unique_ptr<Upload> { return std::make_unique<HostUpload>(); },
    .batch_uploader_make = nullptr,
    .step_graph_make = nullptr,
#define DPT_KERNEL(ret, name, params) .name = name,
#include "backend/kernel_list.h"
};

}  // namespace

const Kernels& kernels() { return kTable; }

}  // namespace dpt::cpu
