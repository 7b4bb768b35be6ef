// Per-channel bias kernels (see kernels.h). The sum is one block per channel, its threads
// walking the channel's N*H*W values; convolutions with a bias are the small layers of
// small networks (mnist_cnn), so this favours simplicity over occupancy.
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/layout.h"

namespace dpt::cuda {
namespace {

template <class T>
__global__ void bias_add_kernel(T* out, const float* bias, int64_t n, int64_t c, int64_t hw, bool nhwc,
                                bool relu) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    float v = to_float(out[i]) + bias[nhwc ? i % c : (i / hw) % c];
    out[i] = from_float<T>(relu && !(v > 0.0f) ? 0.0f : v);
  }
}

template <class T>
__global__ void channel_sum_kernel(const T* t, float* sum, int64_t m, int64_t c, int64_t hw, bool nhwc) {
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double s = 0;
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x)
      s += to_float(t[nhwc ? j * c + ch : ((j / hw) * c + ch) * hw + j % hw]);
    s = block_sum(s);
    if (threadIdx.x == 0) sum[ch] = static_cast<float>(s);
  }
}

void check_bias(const Tensor& t, const Tensor& bias) {
  DPT_CHECK(t.dim() == 4 && bias.dtype() == DType::f32 && bias.is_contiguous() && bias.numel() == t.size(1))
      << "conv2d bias on cuda: needs a 4-D tensor and a contiguous f32 [" << (t.dim() == 4 ? t.size(1) : 0)
      << "] bias";
}

}  // namespace

void channel_bias_add(const Tensor& out, const Tensor& bias, bool relu) {
  check_bias(out, bias);
  bool nhwc = layout_nhwc(out, "conv2d bias");
  int64_t n = out.numel(), c = out.size(1), hw = out.size(2) * out.size(3);
  launch_typed(out.device().index, out.dtype(), "conv2d bias", n, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    bias_add_kernel<<<grid_for(n), kBlock, 0, stream>>>(elements<T>(out), bias.data<float>(), n, c, hw, nhwc,
                                                        relu);
  });
}

void channel_sum(const Tensor& t, const Tensor& sum) {
  check_bias(t, sum);
  bool nhwc = layout_nhwc(t, "conv2d bias gradient");
  int64_t c = t.size(1), hw = t.size(2) * t.size(3), m = t.size(0) * hw;
  if (c == 0) return;
  KernelScope scope(t.device().index);
  unsigned blocks = static_cast<unsigned>(std::min<int64_t>(c, 65535));
  dispatch_float(t.dtype(), "conv2d bias gradient", [&](auto tag) {
    using T = decltype(tag);
    channel_sum_kernel<<<blocks, kBlock, 0, scope.stream()>>>(elements<T>(t), sum.data<float>(), m, c, hw,
                                                              nhwc);
  });
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace dpt::cuda
