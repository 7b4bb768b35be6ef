// conv2d: checks at the door, the oneDNN kernels in backend/cpu/conv.cpp (cuDNN's in
// backend/cuda/conv.cpp for CUDA tensors), and a backward that masks by the fused ReLU
// first and skips the passes no input needs. On CPU the output is channels-last (unless
// DPT_CHANNELS_LAST=0), whatever the input's layout, so a network converts once at its
// first convolution and its activations stay NHWC from there; on CUDA it is NCHW unless
// the input is channels-last or Conv2dOptions::channels_last asks for NHWC, and x and w may
// be bf16 (mixed precision, nn/compute.h).
#include "ops/conv.h"

#include "autograd/node.h"
#include "backend/cpu/conv.h"
#include "backend/cpu/onednn.h"
#include "ops/device_check.h"
#include "ops/mac_count.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/activation.h"
#include "backend/cuda/cast.h"
#include "backend/cuda/conv.h"
#include "backend/cuda/layout.h"
#endif

namespace dpt {
namespace {

int64_t conv_out_size(int64_t in, int64_t kernel, const Conv2dOptions& o) {
  return (in + 2 * o.padding - o.dilation * (kernel - 1) - 1) / o.stride + 1;
}

Shape conv2d_check(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& o) {
  Device device = op_device_mixed("conv2d", {&x, &w});
  if (bias.defined()) {
    DPT_CHECK(bias.dtype() == DType::f32 && bias.device() == device)
        << "conv2d: bias must be f32 on " << device.str() << ", got " << dtype_name(bias.dtype()) << " on "
        << bias.device().str();
  }
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  DPT_CHECK(x.dim() == 4) << "conv2d: input must be 4-D [N, C, H, W], got " << shape_str(xs);
  DPT_CHECK(w.dim() == 4) << "conv2d: weight must be 4-D [OC, C/groups, KH, KW], got " << shape_str(ws);
  DPT_CHECK(o.stride >= 1 && o.dilation >= 1 && o.padding >= 0 && o.groups >= 1)
      << "conv2d: needs stride >= 1, dilation >= 1, padding >= 0, groups >= 1; got stride " << o.stride
      << ", dilation " << o.dilation << ", padding " << o.padding << ", groups " << o.groups;
  DPT_CHECK(xs[1] == ws[1] * o.groups)
      << "conv2d: input " << shape_str(xs) << " has " << xs[1] << " channels but weight " << shape_str(ws)
      << " expects " << ws[1] * o.groups << " (groups " << o.groups << ")";
  DPT_CHECK(ws[0] % o.groups == 0) << "conv2d: weight " << shape_str(ws) << " has " << ws[0]
                                   << " output channels, not divisible by groups " << o.groups;
  if (bias.defined()) {
    DPT_CHECK(bias.shape() == Shape{ws[0]})
        << "conv2d: bias " << shape_str(bias.shape()) << " does not match weight " << shape_str(ws)
        << ": expected [" << ws[0] << "]";
  }
  int64_t oh = conv_out_size(xs[2], ws[2], o), ow = conv_out_size(xs[3], ws[3], o);
  DPT_CHECK(xs[0] > 0 && ws[0] > 0 && ws[2] > 0 && ws[3] > 0 && oh > 0 && ow > 0)
      << "conv2d: input " << shape_str(xs) << " with padding " << o.padding << " is smaller than weight "
      << shape_str(ws) << " with dilation " << o.dilation << " (or a size is 0)";
  return {xs[0], ws[0], oh, ow};
}

#ifdef DPT_WITH_CUDA
// t in the layout the kernels run in: contiguous NCHW, or channels-last when nhwc. Not
// recorded: the backward returns gradients in the inputs' own layouts.
Tensor in_layout(const Tensor& t, bool nhwc) {
  if (!nhwc) return cuda::contiguous(t);
  if (t.is_channels_last()) return t;
  Tensor out = Tensor::empty_channels_last(t.shape(), t.dtype(), t.device());
  cuda::cast_copy(t, out);
  return out;
}

// cuDNN runs NCHW with OIHW weights, or NHWC with OHWI weights; f32, or bf16 on tensor cores.
Tensor conv2d_cuda(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in, const Shape& out_shape,
                   const Conv2dOptions& options, bool fuse_relu) {
  Device device = x_in.device();
  bool nhwc = options.channels_last || (x_in.is_channels_last() && !x_in.is_contiguous());
  Tensor x = in_layout(x_in, nhwc), w = in_layout(w_in, nhwc);
  Tensor bias = bias_in.defined() ? cuda::contiguous(bias_in) : Tensor();
  cuda::ConvParams params{options.stride, options.padding, options.dilation, options.groups, nhwc};
  Tensor out = nhwc ? Tensor::empty_channels_last(out_shape, x.dtype(), device)
                    : Tensor::empty(out_shape, x.dtype(), device);
  cuda::conv2d_forward(x, w, bias, params, fuse_relu, out);
  mac_count_add(out.numel() * w.size(1) * w.size(2) * w.size(3));

  bool need_x = x_in.requires_grad(), need_w = w_in.requires_grad();
  bool need_b = bias_in.defined() && bias_in.requires_grad();
  autograd::record("conv2d", out, {x_in, w_in, bias_in},
                   [x = (need_w || need_b) ? x.detach() : Tensor(), w = need_x ? w.detach() : Tensor(),
                    out = fuse_relu ? out.detach() : Tensor(), like = TensorLayout(out), x_like = TensorLayout(x_in),
                    w_like = TensorLayout(w_in), x_shape = x.shape(), w_shape = w.shape(), params, device, need_x,
                    need_w, need_b](const Tensor& grad_out) {
                     check_grad("conv2d backward", grad_out, device, like.dtype);
                     Tensor g = layout_like_on_device(grad_out, like);
                     // Fused ReLU: the gradient flows only where the output was > 0.
                     if (out.defined()) g = cuda::relu_backward(out, g);
                     DType dtype = like.dtype;
                     std::vector<Tensor> grads(3);
                     if (need_x) grads[0] = cuda::empty_in_layout(x_shape, dtype, device, params.nhwc);
                     if (need_w) grads[1] = cuda::empty_in_layout(w_shape, dtype, device, params.nhwc);
                     if (need_b) grads[2] = Tensor::empty({w_shape[0]}, DType::f32, device);
                     cuda::conv2d_backward(x_shape, w_shape, x, w, g, params, grads[0], grads[1], grads[2]);
                     // In the inputs' own layouts (a no-op inside a network, whose tensors
                     // are already in the kernels' layout).
                     if (need_x) grads[0] = layout_like_on_device(grads[0], x_like);
                     if (need_w) grads[1] = layout_like_on_device(grads[1], w_like);
                     return grads;
                   });
  return out;
}
#endif

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in, const Conv2dOptions& options,
              bool fuse_relu) {
  Shape out_shape = conv2d_check(x_in, w_in, bias_in, options);
#ifdef DPT_WITH_CUDA
  if (x_in.device().is_cuda()) return conv2d_cuda(x_in, w_in, bias_in, out_shape, options, fuse_relu);
#endif
  Tensor x = cpu::onednn::in_kernel_layout(x_in), w = w_in.contiguous();
  Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
  cpu::ConvParams params{options.stride, options.padding, options.dilation, options.groups};
  cpu::onednn::Layout out_layout =
      cpu::onednn::channels_last_enabled() ? cpu::onednn::Layout::nhwc : cpu::onednn::Layout::nchw;
  Tensor out = cpu::onednn::empty_in(out_shape, out_layout);
  cpu::conv2d_forward(x, w, bias, params, fuse_relu, out);
  mac_count_add(out.numel() * w.size(1) * w.size(2) * w.size(3));  // w.size(1) = C / groups

  bool need_x = x_in.requires_grad(), need_w = w_in.requires_grad();
  bool need_b = bias_in.defined() && bias_in.requires_grad();
  // Save only what the wanted gradients read: w for dL/dx, x for dL/dw and dL/dbias.
  autograd::record("conv2d", out, {x_in, w_in, bias_in},
                   [x = (need_w || need_b) ? x.detach() : Tensor(), w = need_x ? w.detach() : Tensor(),
                    out = fuse_relu ? out.detach() : Tensor(), x_shape = x.shape(), w_shape = w.shape(),
                    x_layout = cpu::onednn::layout_of(x), out_layout, params, need_x, need_w,
                    need_b](const Tensor& grad_out) {
                     check_grad("conv2d backward", grad_out, Device::cpu());
                     // In the output's layout: the one the kernels were built for.
                     Tensor g = cpu::onednn::to_layout(grad_out, out_layout);
                     if (out.defined()) {  // fused ReLU: the gradient flows only where the output was > 0
                       Tensor masked = Tensor::empty_like(g);
                       cpu::onednn::relu_mask_backward(g, out, masked);
                       g = masked;
                     }
                     std::vector<Tensor> grads(3);
                     if (need_x) grads[0] = cpu::onednn::empty_in(x_shape, x_layout);  // the input's layout
                     if (need_w) grads[1] = Tensor::empty(w_shape);
                     if (need_b) grads[2] = Tensor::empty({w_shape[0]});
                     cpu::conv2d_backward(x_shape, w_shape, x, w, g, params, grads[0], grads[1], grads[2]);
                     return grads;
                   });
  return out;
}

}  // namespace dpt
