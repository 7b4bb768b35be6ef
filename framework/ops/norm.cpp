// batch_norm2d: checks, the oneDNN kernels in backend/cpu/batchnorm.cpp (cuDNN's in
// backend/cuda/batchnorm.cu for CUDA tensors), the running statistics update, and a
// backward that reuses the forward's statistics and ReLU mask.
#include "ops/norm.h"

#include "autograd/node.h"
#include "backend/cpu/batchnorm.h"
#include "backend/cpu/onednn.h"
#include "ops/device_check.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/batchnorm.h"
#endif

namespace dpt {
namespace {

void check_channel_tensor(const char* what, const Tensor& t, const Tensor& x, bool contiguous) {
  op_device("batch_norm2d", {&t});
  DPT_CHECK(t.device() == x.device()) << "batch_norm2d: " << what << " is on " << t.device().str() << " but x on "
                                      << x.device().str() << "; move them to one device first";
  const Shape& x_shape = x.shape();
  DPT_CHECK(t.shape() == Shape{x_shape[1]})
      << "batch_norm2d: " << what << " " << shape_str(t.shape()) << " does not match input "
      << shape_str(x_shape) << ": expected [" << x_shape[1] << "]";
  DPT_CHECK(!contiguous || t.is_contiguous())
      << "batch_norm2d: " << what << " must be contiguous (updated in place)";
}

#ifdef DPT_WITH_CUDA
// x contiguous NCHW or channels-last, f32 or bf16; the output and x's gradient follow it.
// Training keeps the saved batch mean and 1/sqrt(var + eps) for the backward; eval keeps
// snapshots of the running statistics. A fused ReLU is the backend's (inside its kernels
// where it can); the backward hands it the output, whose > 0 is the ReLU's mask.
Tensor batch_norm2d_cuda(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                         const Tensor& running_mean, const Tensor& running_var, bool training,
                         const BatchNormOptions& options, bool fuse_relu) {
  Device device = x_in.device();
  Tensor x = kernel_layout_on_device(x_in), weight = cuda::contiguous(weight_in), bias = cuda::contiguous(bias_in);
  Shape channels{x.size(1)};
  Tensor out = Tensor::empty_like(x);
  Tensor mean, stat;  // training: batch mean, invstd; eval: running mean, running variance
  if (training) {
    mean = Tensor::empty(channels, DType::f32, device);
    stat = Tensor::empty(channels, DType::f32, device);
    cuda::batch_norm_forward_training(x, weight, bias, running_mean, running_var, options.momentum,
                                      options.eps, fuse_relu, out, mean, stat);
  } else {
    mean = running_mean.clone();
    stat = running_var.clone();
    cuda::batch_norm_forward_inference(x, weight, bias, mean, stat, options.eps, fuse_relu, out);
  }

  bool need_x = x_in.requires_grad(), need_w = weight_in.requires_grad(), need_b = bias_in.requires_grad();
  autograd::record(
      "batch_norm2d", out, {x_in, weight_in, bias_in},
      [x = x.detach(), weight = weight.detach(), mean, stat, out = fuse_relu ? out.detach() : Tensor(),
       training, eps = options.eps, device, need_x, need_w, need_b](const Tensor& grad_out) {
        check_grad("batch_norm2d backward", grad_out, device, x.dtype());
        Tensor g = layout_like_on_device(grad_out, x);
        // The kernels compute all three at once; the unwanted ones are dropped.
        Tensor grad_x = Tensor::empty_like(x);
        Tensor grad_w = Tensor::empty(weight.shape(), DType::f32, device);
        Tensor grad_b = Tensor::empty(weight.shape(), DType::f32, device);
        if (training)
          cuda::batch_norm_backward_training(x, g, out, weight, mean, stat, eps, grad_x, grad_w, grad_b);
        else
          cuda::batch_norm_backward_inference(x, g, out, weight, mean, stat, eps, grad_x, grad_w, grad_b);
        return std::vector<Tensor>{need_x ? grad_x : Tensor(), need_w ? grad_w : Tensor(),
                                   need_b ? grad_b : Tensor()};
      });
  return out;
}
#endif

}  // namespace

Tensor batch_norm2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                    const Tensor& running_mean, const Tensor& running_var, bool training,
                    const BatchNormOptions& options, bool fuse_relu) {
  op_device_mixed("batch_norm2d", {&x_in});
  const Shape& xs = x_in.shape();
  DPT_CHECK(x_in.dim() == 4) << "batch_norm2d: input must be 4-D [N, C, H, W], got " << shape_str(xs);
  DPT_CHECK(weight_in.defined() && bias_in.defined()) << "batch_norm2d: weight and bias are required";
  check_channel_tensor("weight", weight_in, x_in, false);
  check_channel_tensor("bias", bias_in, x_in, false);
  bool track = running_mean.defined() || running_var.defined();
  DPT_CHECK(!track || (running_mean.defined() && running_var.defined()))
      << "batch_norm2d: give both running_mean and running_var, or neither";
  DPT_CHECK(training || track) << "batch_norm2d: eval mode needs running_mean and running_var";
  if (track) {
    check_channel_tensor("running_mean", running_mean, x_in, true);
    check_channel_tensor("running_var", running_var, x_in, true);
  }
  int64_t count = xs[0] * xs[2] * xs[3];
  DPT_CHECK(!training || count > 1) << "batch_norm2d: training needs more than one value per channel, input "
                                    << shape_str(xs);
#ifdef DPT_WITH_CUDA
  if (x_in.device().is_cuda())
    return batch_norm2d_cuda(x_in, weight_in, bias_in, running_mean, running_var, training, options,
                             fuse_relu);
#endif

  // Channels-last stays channels-last (output and gradient too); other strides go NCHW.
  Tensor x = cpu::onednn::in_kernel_layout(x_in);
  Tensor weight = weight_in.contiguous(), bias = bias_in.contiguous();
  cpu::onednn::Layout layout = cpu::onednn::layout_of(x);
  cpu::BatchNormParams params{options.eps, !training, fuse_relu};
  Tensor mean, var;
  if (training) {
    mean = Tensor::empty({xs[1]});
    var = Tensor::empty({xs[1]});
  } else {  // a snapshot: the backward must see the statistics the forward used
    mean = running_mean.clone();
    var = running_var.clone();
  }
  bool record = autograd::needs_recording({x_in, weight_in, bias_in});
  Tensor workspace;
  if (record && fuse_relu) {
    size_t bytes = cpu::batch_norm_workspace_bytes(xs, params, layout == cpu::onednn::Layout::nhwc);
    if (bytes > 0) workspace = Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)});
  }
  Tensor out = cpu::onednn::empty_in(xs, layout);
  cpu::batch_norm_forward(x, weight, bias, mean, var, params, out, workspace);
  if (training && track)
    cpu::batch_norm_update_running(running_mean, running_var, mean, var, options.momentum, count);

  bool need_x = x_in.requires_grad(), need_w = weight_in.requires_grad(), need_b = bias_in.requires_grad();
  autograd::record("batch_norm2d", out, {x_in, weight_in, bias_in},
                   [x = x.detach(), weight = weight.detach(), bias = bias.detach(), mean, var, params,
                    workspace, layout, need_x, need_w, need_b](const Tensor& grad_out) {
                     check_grad("batch_norm2d backward", grad_out, Device::cpu());
                     Tensor g = cpu::onednn::to_layout(grad_out, layout);
                     // oneDNN computes all three at once; the unwanted ones are dropped.
                     Tensor grad_x = cpu::onednn::empty_in(x.shape(), layout);
                     Tensor grad_w = Tensor::empty(weight.shape()), grad_b = Tensor::empty(bias.shape());
                     cpu::batch_norm_backward(x, g, weight, bias, mean, var, params, workspace, grad_x,
                                              grad_w, grad_b);
                     return std::vector<Tensor>{need_x ? grad_x : Tensor(), need_w ? grad_w : Tensor(),
                                                need_b ? grad_b : Tensor()};
                   });
  return out;
}

}  // namespace dpt
