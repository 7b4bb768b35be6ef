// Multi-tensor optimizer kernels (see kernel_list.h). A launch takes up to kMaxTensors slots by
// value (well under the 4 KiB kernel-parameter limit); blockIdx.y picks the slot and the
// x blocks stride over its elements, so no per-launch table has to be copied to the GPU.
#include "backend/cuda/kernels.h"

#include "backend/cuda/launch.h"

namespace dpt::cuda {
namespace {

constexpr int kMaxTensors = 48;

template <class Slot>
struct SlotList {
  Slot slot[kMaxTensors];
};

__global__ void sgd_kernel(SlotList<SgdSlot> list, float lr_value, const float* lr_on_device, float wd, float mu,
                           bool nesterov) {
  const SgdSlot s = list.slot[blockIdx.y];
  const float lr = lr_on_device ? *lr_on_device : lr_value;
  for (int64_t i = thread_index(); i < s.n; i += thread_count()) {
    float w = s.weight[i];
    const float g = s.grad[i];
    if (mu == 0.0f) {
      w -= lr * (g + wd * w);
    } else if (nesterov) {
      const float gi = g + wd * w;
      const float v = mu * s.velocity[i] + gi;
      s.velocity[i] = v;
      w -= lr * (gi + mu * v);
    } else {
      const float v = mu * s.velocity[i] + g + wd * w;
      s.velocity[i] = v;
      w -= lr * v;
    }
    s.weight[i] = w;
  }
}

__global__ void adamw_kernel(SlotList<AdamWSlot> list, float lr_value, float decay_value, float b1, float b2,
                             float eps, float c1_value, float c2_value, const float* scalars_on_device) {
  const AdamWSlot s = list.slot[blockIdx.y];
  const float* d = scalars_on_device;
  const float lr = d ? d[0] : lr_value, decay = d ? d[1] : decay_value;
  const float c1 = d ? d[2] : c1_value, c2 = d ? d[3] : c2_value;
  for (int64_t i = thread_index(); i < s.n; i += thread_count()) {
    const float g = s.grad[i];
    const float m = b1 * s.m[i] + (1 - b1) * g;
    const float v = b2 * s.v[i] + (1 - b2) * g * g;
    s.m[i] = m;
    s.v[i] = v;
    s.weight[i] = s.weight[i] * decay - lr * (m / c1) / (sqrtf(v / c2) + eps);
  }
}

__global__ void ema_kernel(float* average, const float* current, int64_t n, float decay_value,
                           const float* decay_on_device) {
  const float decay = decay_on_device ? *decay_on_device : decay_value;
  for (int64_t i = thread_index(); i < n; i += thread_count())
    average[i] = decay * average[i] + (1 - decay) * current[i];
}

// Every thread that sees a bad element writes the same 1, so the race is harmless.
__global__ void nonfinite_kernel(SlotList<FiniteSlot> list, float* flag) {
  const FiniteSlot s = list.slot[blockIdx.y];
  bool bad = false;
  for (int64_t i = thread_index(); i < s.n; i += thread_count()) bad |= !isfinite(s.x[i]);
  if (bad) *flag = 1.0f;
}

// Launches `kernel` over the slots, kMaxTensors per launch.
template <class Slot, class Launch>
void for_each_launch(const std::vector<Slot>& slots, int device, Launch launch) {
  if (slots.empty()) return;
  KernelScope scope(device);
  for (size_t first = 0; first < slots.size(); first += kMaxTensors) {
    SlotList<Slot> list{};
    size_t count = std::min<size_t>(kMaxTensors, slots.size() - first);
    int64_t largest = 1;
    for (size_t k = 0; k < count; ++k) {
      list.slot[k] = slots[first + k];
      largest = std::max(largest, slots[first + k].n);
    }
    dim3 grid(grid_for(largest), static_cast<unsigned>(count));
    launch(grid, scope.stream(), list);
    DPT_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace

void sgd_update(const std::vector<SgdSlot>& slots, int device, float lr, float weight_decay, float momentum,
                bool nesterov, const float* lr_on_device) {
  for_each_launch(slots, device, [&](dim3 grid, cudaStream_t stream, const SlotList<SgdSlot>& list) {
    sgd_kernel<<<grid, kBlock, 0, stream>>>(list, lr, lr_on_device, weight_decay, momentum, nesterov);
  });
}

void adamw_update(const std::vector<AdamWSlot>& slots, int device, float lr, float decay, float beta1,
                  float beta2, float eps, float c1, float c2, const float* scalars_on_device) {
  for_each_launch(slots, device, [&](dim3 grid, cudaStream_t stream, const SlotList<AdamWSlot>& list) {
    adamw_kernel<<<grid, kBlock, 0, stream>>>(list, lr, decay, beta1, beta2, eps, c1, c2, scalars_on_device);
  });
}

void flag_nonfinite(const std::vector<FiniteSlot>& slots, int device, float* flag) {
  for_each_launch(slots, device, [&](dim3 grid, cudaStream_t stream, const SlotList<FiniteSlot>& list) {
    nonfinite_kernel<<<grid, kBlock, 0, stream>>>(list, flag);
  });
}

void ema_update(const Tensor& average, const Tensor& current, float decay, const float* decay_on_device) {
  DPT_CHECK(average.is_contiguous() && current.is_contiguous() && average.shape() == current.shape())
      << "ema on cuda: needs two contiguous tensors of one shape";
  int64_t n = average.numel();
  if (n == 0) return;
  KernelScope scope(average.device().index);
  ema_kernel<<<grid_for(n), kBlock, 0, scope.stream()>>>(average.data<float>(), current.data<float>(), n,
                                                         decay, decay_on_device);
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace dpt::cuda
