// conv2d: checks at the door, the device's kernels (oneDNN, cuDNN; they choose their
// layouts), and a backward that masks by the fused ReLU, skips the passes no input needs
// and returns each gradient in its input's layout.
#include "ops/conv.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/device_check.h"
#include "ops/mac_count.h"

namespace dpt {
namespace {

int64_t conv_out_size(int64_t in, int64_t kernel, const Conv2dOptions& o) {
  return (in + 2 * o.padding - o.dilation * (kernel - 1) - 1) / o.stride + 1;
}

Shape conv2d_check(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& o) {
  Device device = op_device_mixed("conv2d", {&x, &w});
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
    DPT_CHECK(bias.dtype() == DType::f32 && bias.device() == device)
        << "conv2d: bias must be f32 on " << device.str() << ", got " << dtype_name(bias.dtype()) << " on "
        << bias.device().str();
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

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in, const Conv2dOptions& options,
              bool fuse_relu) {
  Shape out_shape = conv2d_check(x_in, w_in, bias_in, options);
  const Kernels& k = kernels_for(x_in.device());
  ConvParams asked{options.stride, options.padding, options.dilation, options.groups, options.channels_last};
  ConvForward run = k.conv2d_forward(kernel_layout_on_device(x_in), w_in, bias_in, asked, fuse_relu, out_shape);
  const Tensor& out = run.out;
  MacCounter::add(out.numel() * run.w.size(1) * run.w.size(2) * run.w.size(3));  // w.size(1) = C / groups

  bool need_x = x_in.requires_grad(), need_w = w_in.requires_grad();
  bool need_b = bias_in.defined() && bias_in.requires_grad();
  // Save only what the wanted gradients read: w for dL/dx, x for dL/dw and dL/dbias.
  autograd::record(
      "conv2d", out, {x_in, w_in, bias_in},
      [&k, x = (need_w || need_b) ? run.x.detach() : Tensor(), w = need_x ? run.w.detach() : Tensor(),
       relu_out = fuse_relu ? out.detach() : Tensor(), out_like = TensorLayout(out), x_kernel = TensorLayout(run.x),
       w_kernel = TensorLayout(run.w), x_like = TensorLayout(x_in), w_like = TensorLayout(w_in), params = run.params,
       need_x, need_w, need_b](const Tensor& grad_out) {
        Tensor g = layout_like_on_device(grad_out, out_like);  // the layout the kernels were built for
        if (relu_out.defined()) g = relu_gradient(relu_out, g);  // fused ReLU: only where the output was > 0
        std::vector<Tensor> grads(3);
        if (need_x) grads[0] = x_kernel.empty(out_like.dtype);
        if (need_w) grads[1] = w_kernel.empty(out_like.dtype);
        if (need_b) grads[2] = Tensor::empty({w_kernel.shape[0]}, DType::f32, out_like.device);
        k.conv2d_backward(x_kernel.shape, w_kernel.shape, x, w, g, params, grads[0], grads[1], grads[2]);
        // In the inputs' own layouts (a no-op inside a network, whose tensors are already in
        // the kernels' layout).
        if (need_x) grads[0] = layout_like_on_device(grads[0], x_like);
        if (need_w) grads[1] = layout_like_on_device(grads[1], w_like);
        return grads;
      });
  return out;
}

}  // namespace dpt
