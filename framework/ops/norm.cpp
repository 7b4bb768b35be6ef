// batch_norm2d: checks, then the device's kernels (which also update the running
// statistics), and a backward that hands them back what their forward kept.
#include "ops/norm.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/device_check.h"

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
  // Channels-last stays channels-last (output and gradient too); other strides go NCHW.
  // Eval normalises with snapshots of the running statistics: the backward must see what
  // the forward used.
  const Kernels& k = kernels_for(x_in.device());
  BatchNormSaved saved;
  saved.x = kernel_layout_on_device(x_in).detach();
  saved.weight = contiguous_on_device(weight_in).detach();
  saved.bias = contiguous_on_device(bias_in).detach();
  saved.params = {options.eps, options.momentum, training, fuse_relu};
  if (!training) {
    saved.mean = running_mean.clone();
    saved.stat = running_var.clone();
  }
  bool record = autograd::needs_recording({x_in, weight_in, bias_in});
  Tensor out = k.batch_norm_forward(saved.x, saved.weight, saved.bias, running_mean, running_var, record, saved);

  bool need_x = x_in.requires_grad(), need_w = weight_in.requires_grad(), need_b = bias_in.requires_grad();
  autograd::record("batch_norm2d", out, {x_in, weight_in, bias_in},
                   [&k, saved, need_x, need_w, need_b](const Tensor& grad_out) {
                     const Tensor& x = saved.x;
                     Tensor g = layout_like_on_device(grad_out, TensorLayout(x));
                     // The kernels compute all three at once; the unwanted ones are dropped.
                     Tensor grad_x = Tensor::empty_like(x);
                     Tensor grad_w = Tensor::empty(saved.weight.shape(), DType::f32, x.device());
                     Tensor grad_b = Tensor::empty(saved.weight.shape(), DType::f32, x.device());
                     k.batch_norm_backward(saved, g, grad_x, grad_w, grad_b);
                     return std::vector<Tensor>{need_x ? grad_x : Tensor(), need_w ? grad_w : Tensor(),
                                                need_b ? grad_b : Tensor()};
                   });
  return out;
}

}  // namespace dpt
