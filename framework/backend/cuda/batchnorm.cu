// cuDNN spatial batch norm, and the eval-mode backward kernel (see kernel_list.h). cuDNN's
// calls take no ReLU, so on this path it runs as the separate relu kernels.
#include "backend/cuda/cudnn_desc.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace dpt::cuda {
namespace {

// One block per channel: grad_x elementwise, the two sums in double.
__global__ void backward_inference_kernel(const float* x, const float* grad_out, const float* weight,
                                          const float* mean, const float* var, float eps, float* grad_x,
                                          float* grad_weight, float* grad_bias, int64_t n, int64_t c,
                                          int64_t hw) {
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    const float invstd = 1.0f / sqrtf(var[ch] + eps);
    const float scale = weight[ch] * invstd;
    double sum_g = 0, sum_g_xhat = 0;
    for (int64_t i = threadIdx.x; i < n * hw; i += blockDim.x) {
      int64_t k = ((i / hw) * c + ch) * hw + i % hw;
      float g = grad_out[k];
      sum_g += g;
      sum_g_xhat += static_cast<double>(g) * ((x[k] - mean[ch]) * invstd);
      grad_x[k] = g * scale;
    }
    sum_g = block_sum(sum_g);
    sum_g_xhat = block_sum(sum_g_xhat);
    if (threadIdx.x == 0) {
      grad_bias[ch] = static_cast<float>(sum_g);
      grad_weight[ch] = static_cast<float>(sum_g_xhat);
    }
  }
}

void check_layout(const Tensor& x, std::initializer_list<const Tensor*> others) {
  DPT_CHECK(x.dim() == 4 && x.is_contiguous())
      << "batch_norm2d on cuda: x must be contiguous NCHW, got " << shape_str(x.shape());
  for (const Tensor* t : others)
    if (t->defined())
      DPT_CHECK(t->is_contiguous()) << "batch_norm2d on cuda: every tensor must be contiguous";
}

// The descriptors of one call: x (also out and the gradients) and the [1, C, 1, 1] channel tensors.
struct Descriptors {
  explicit Descriptors(const Shape& xs) : x(xs, "batch_norm2d"), channel({1, xs[1], 1, 1}, "batch_norm2d") {}
  TensorDescriptor x, channel;
};

float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// cuDNN takes f32 NCHW here; bf16 and channels-last go to batchnorm_kernels.cu.
bool uses_cudnn(const Tensor& x) { return x.dtype() == DType::f32 && x.is_contiguous(); }

// The gradient the normalisation sees: grad_out masked by a fused ReLU's output, if any.
Tensor relu_masked(const Tensor& grad_out, const Tensor& relu_out) {
  if (!relu_out.defined()) return grad_out;
  Tensor g = Tensor::empty_like(relu_out);
  relu_backward(relu_out, grad_out, g);
  return g;
}

// Requires: N H W > 1. Ensures: out = weight (x - mean) / sqrt(var + eps) + bias with the
// batch mean and biased variance; save_mean = mean, save_invstd = 1 / sqrt(var + eps); defined
// running_mean/var become (1 - momentum) running + momentum batch, with the unbiased batch
// variance (cuDNN's rule, also PyTorch's). With relu, out = max(0, .) as relu_forward does.
void batch_norm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 const Tensor& running_mean, const Tensor& running_var, float momentum,
                                 float eps, bool relu, const Tensor& out, const Tensor& save_mean,
                                 const Tensor& save_invstd) {
  if (!uses_cudnn(x))
    return bn_kernels::forward_training(x, weight, bias, running_mean, running_var, momentum, eps, relu, out,
                                        save_mean, save_invstd);
  check_layout(x, {&weight, &bias, &running_mean, &running_var, &out, &save_mean, &save_invstd});
  DPT_CHECK(running_mean.defined() == running_var.defined())
      << "batch_norm2d on cuda: running_mean and running_var come together";
  int device = x.device().index;
  DeviceGuard guard(device);
  Descriptors d(x.shape());
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      device_context(device).cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x.get(), x.data<float>(),
      d.x.get(), out.data<float>(), d.channel.get(), weight.data<float>(), bias.data<float>(), momentum,
      data_or_null(running_mean), data_or_null(running_var), eps, save_mean.data<float>(),
      save_invstd.data<float>()));
  if (relu) relu_forward(out, out);
}

// out = weight (x - mean) / sqrt(var + eps) + bias with the given statistics, then ReLU.
void batch_norm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& mean, const Tensor& var, float eps, bool relu,
                                  const Tensor& out) {
  if (!uses_cudnn(x)) return bn_kernels::forward_inference(x, weight, bias, mean, var, eps, relu, out);
  check_layout(x, {&weight, &bias, &mean, &var, &out});
  int device = x.device().index;
  DeviceGuard guard(device);
  Descriptors d(x.shape());
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      device_context(device).cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x.get(), x.data<float>(),
      d.x.get(), out.data<float>(), d.channel.get(), weight.data<float>(), bias.data<float>(),
      mean.data<float>(), var.data<float>(), eps));
  if (relu) relu_forward(out, out);
}

// The backwards take relu_out = the forward's out when it fused a ReLU (undefined when it
// did not): grad_out then counts only where relu_out > 0; grad_out itself is left unchanged.
void batch_norm_backward_training(const Tensor& x, const Tensor& grad_out, const Tensor& relu_out,
                                  const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                  float eps, const Tensor& grad_x, const Tensor& grad_weight,
                                  const Tensor& grad_bias) {
  if (!uses_cudnn(x))
    return bn_kernels::backward(x, grad_out, relu_out, weight, save_mean, save_invstd, Tensor(), 0.0f, true,
                                grad_x, grad_weight, grad_bias);
  check_layout(x,
               {&grad_out, &relu_out, &weight, &save_mean, &save_invstd, &grad_x, &grad_weight, &grad_bias});
  Tensor g = relu_masked(grad_out, relu_out);
  int device = x.device().index;
  DeviceGuard guard(device);
  Descriptors d(x.shape());
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationBackward(
      device_context(device).cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, d.x.get(),
      x.data<float>(), d.x.get(), g.data<float>(), d.x.get(), grad_x.data<float>(), d.channel.get(),
      weight.data<float>(), grad_weight.data<float>(), grad_bias.data<float>(), eps, save_mean.data<float>(),
      save_invstd.data<float>()));
}

// The backward of the inference forward (mean and var constants): grad_x = weight invstd
// grad_out, grad_weight = sum(grad_out xhat), grad_bias = sum(grad_out).
void batch_norm_backward_inference(const Tensor& x, const Tensor& grad_out, const Tensor& relu_out,
                                   const Tensor& weight, const Tensor& mean, const Tensor& var, float eps,
                                   const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
  if (!uses_cudnn(x))
    return bn_kernels::backward(x, grad_out, relu_out, weight, mean, Tensor(), var, eps, false, grad_x,
                                grad_weight, grad_bias);
  check_layout(x, {&grad_out, &relu_out, &weight, &mean, &var, &grad_x, &grad_weight, &grad_bias});
  int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  if (c == 0) return;
  Tensor g = relu_masked(grad_out, relu_out);
  KernelScope scope(x.device().index);
  unsigned blocks = static_cast<unsigned>(std::min<int64_t>(c, 65535));
  backward_inference_kernel<<<blocks, kBlock, 0, scope.stream()>>>(
      x.data<float>(), g.data<float>(), weight.data<float>(), mean.data<float>(), var.data<float>(), eps,
      grad_x.data<float>(), grad_weight.data<float>(), grad_bias.data<float>(), n, c, hw);
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace

// Training keeps cuDNN's saved batch mean and 1/sqrt(var + eps); the backward of a fused
// ReLU reads the output, whose > 0 is the mask.
Tensor batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const Tensor& running_mean, const Tensor& running_var, bool, BatchNormSaved& s) {
  const BatchNormParams& p = s.params;
  Tensor out = Tensor::empty_like(x);
  if (p.training) {
    s.mean = Tensor::empty({x.size(1)}, DType::f32, x.device());
    s.stat = Tensor::empty({x.size(1)}, DType::f32, x.device());
    batch_norm_forward_training(x, weight, bias, running_mean, running_var, p.momentum, p.eps, p.relu, out,
                                s.mean, s.stat);
  } else {
    batch_norm_forward_inference(x, weight, bias, s.mean, s.stat, p.eps, p.relu, out);
  }
  if (p.relu) s.out = out.detach();
  return out;
}

void batch_norm_backward(const BatchNormSaved& s, const Tensor& grad_out, const Tensor& grad_x,
                         const Tensor& grad_weight, const Tensor& grad_bias) {
  if (s.params.training)
    batch_norm_backward_training(s.x, grad_out, s.out, s.weight, s.mean, s.stat, s.params.eps, grad_x,
                                 grad_weight, grad_bias);
  else
    batch_norm_backward_inference(s.x, grad_out, s.out, s.weight, s.mean, s.stat, s.params.eps, grad_x,
                                  grad_weight, grad_bias);
}

}  // namespace dpt::cuda
