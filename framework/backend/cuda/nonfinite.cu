// Multi-tensor finite check (see nonfinite.h): as optim.cu's updates, a launch takes up to
// kMaxTensors (pointer, length) slots by value, blockIdx.y picking the slot. A thread that
// finds a non-finite value stores 1 in the flag; every writer stores the same value, so
// the order does not matter, and finite tensors (almost every step) write nothing.
#include "backend/cuda/allocator.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/nonfinite.h"

namespace dpt::cuda {
namespace {

constexpr int kMaxTensors = 64;

struct Slot {
  const float* p;
  int64_t n;
};
struct SlotList {
  Slot slot[kMaxTensors];
};

__global__ void finite_kernel(SlotList list, unsigned* flag) {
  const Slot s = list.slot[blockIdx.y];
  bool bad = false;
  for (int64_t i = thread_index(); i < s.n; i += thread_count()) bad |= !isfinite(s.p[i]);
  if (bad) *flag = 1u;
}

}  // namespace

bool all_finite(const std::vector<Tensor>& tensors, int device) {
  std::vector<Slot> slots;
  for (const Tensor& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    DPT_CHECK(t.dtype() == DType::f32 && t.is_contiguous() && t.device() == Device::cuda(device))
        << "all_finite on cuda: expected contiguous f32 tensors on cuda:" << device << ", got "
        << dtype_name(t.dtype()) << " " << shape_str(t.shape()) << " on " << t.device().str();
    slots.push_back({t.data<float>(), t.numel()});
  }
  if (slots.empty()) return true;
  DeviceBuffer flag(sizeof(unsigned), device);
  {
    KernelScope scope(device);
    CUDA_CHECK(cudaMemsetAsync(flag.as<void>(), 0, sizeof(unsigned), scope.stream()));
    for (size_t first = 0; first < slots.size(); first += kMaxTensors) {
      SlotList list{};
      const size_t count = std::min<size_t>(kMaxTensors, slots.size() - first);
      int64_t largest = 1;
      for (size_t k = 0; k < count; ++k) {
        list.slot[k] = slots[first + k];
        largest = std::max(largest, list.slot[k].n);
      }
      finite_kernel<<<dim3(grid_for(largest), static_cast<unsigned>(count)), kBlock, 0, scope.stream()>>>(
          list, flag.as<unsigned>());
      DPT_CUDA_LAUNCH_CHECK();
    }
  }
  unsigned bad = 0;
  copy_bytes(&bad, Device::cpu(), flag.as<void>(), Device::cuda(device), sizeof bad);
  return bad == 0;
}

}  // namespace dpt::cuda
