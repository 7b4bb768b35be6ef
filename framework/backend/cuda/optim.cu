// Multi-tensor optimizer kernels (see optim.h). A launch takes up to kMaxTensors slots by
// value (well under the 4 KiB kernel-parameter limit); blockIdx.y picks the slot and the
// x blocks stride over its elements, so no per-launch table has to be copied to the GPU.
#include "backend/cuda/optim.h"

#include "backend/cuda/launch.h"

namespace dpt::cuda {
namespace {

constexpr int kMaxTensors = 48;

template <class Slot>
struct SlotList {
  Slot slot[kMaxTensors];
};

__global__ void sgd_kernel(SlotList<SgdSlot> list, float lr, float wd, float mu, bool nesterov) {
  const SgdSlot s = list.slot[blockIdx.y];
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

__global__ void adamw_kernel(SlotList<AdamWSlot> list, float lr, float decay, float b1, float b2, float eps,
                             float c1, float c2) {
  const AdamWSlot s = list.slot[blockIdx.y];
  for (int64_t i = thread_index(); i < s.n; i += thread_count()) {
    const float g = s.grad[i];
    const float m = b1 * s.m[i] + (1 - b1) * g;
    const float v = b2 * s.v[i] + (1 - b2) * g * g;
    s.m[i] = m;
    s.v[i] = v;
    s.weight[i] = s.weight[i] * decay - lr * (m / c1) / (sqrtf(v / c2) + eps);
  }
}

__global__ void ema_kernel(float* average, const float* current, int64_t n, float decay) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    average[i] = decay * average[i] + (1 - decay) * current[i];
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
                bool nesterov) {
  for_each_launch(slots, device, [&](dim3 grid, cudaStream_t stream, const SlotList<SgdSlot>& list) {
    sgd_kernel<<<grid, kBlock, 0, stream>>>(list, lr, weight_decay, momentum, nesterov);
  });
}

void adamw_update(const std::vector<AdamWSlot>& slots, int device, float lr, float decay, float beta1,
                  float beta2, float eps, float c1, float c2) {
  for_each_launch(slots, device, [&](dim3 grid, cudaStream_t stream, const SlotList<AdamWSlot>& list) {
    adamw_kernel<<<grid, kBlock, 0, stream>>>(list, lr, decay, beta1, beta2, eps, c1, c2);
  });
}

void ema_update(const Tensor& average, const Tensor& current, float decay) {
  DPT_CHECK(average.is_contiguous() && current.is_contiguous() && average.shape() == current.shape())
      << "ema on cuda: needs two contiguous tensors of one shape";
  int64_t n = average.numel();
  if (n == 0) return;
  KernelScope scope(average.device().index);
  ema_kernel<<<grid_for(n), kBlock, 0, scope.stream()>>>(average.data<float>(), current.data<float>(), n,
                                                         decay);
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace dpt::cuda
