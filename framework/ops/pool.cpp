// Pooling ops: checks, then the kernels in backend/cpu/pool.cpp (backend/cuda/pool.cu for
// CUDA tensors). On CPU max pooling's forward keeps oneDNN's workspace (the argmax) only
// when a backward can follow; cuDNN's backward rereads the input and output instead.
#include "ops/pool.h"

#include "autograd/node.h"
#include "backend/cpu/onednn.h"
#include "backend/cpu/pool.h"
#include "ops/device_check.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/pool.h"
#endif

namespace dpt {
namespace {

#ifdef DPT_WITH_CUDA
// The output (and x's gradient) in x's dtype and layout: NCHW or channels-last.
Tensor pool2d_cuda(cpu::PoolKind kind, const char* name, const Tensor& x_in, const Shape& out_shape,
                   const cpu::PoolParams& p) {
  Device device = x_in.device();
  Tensor x = kernel_layout_on_device(x_in);
  bool nhwc = !x.is_contiguous();
  Tensor out = nhwc ? Tensor::empty_channels_last(out_shape, x.dtype(), device)
                    : Tensor::empty(out_shape, x.dtype(), device);
  cuda::PoolKind cuda_kind = kind == cpu::PoolKind::max ? cuda::PoolKind::max : cuda::PoolKind::avg;
  cuda::PoolParams params{p.kernel, p.stride, p.padding};
  cuda::pool2d_forward(cuda_kind, x, params, out);
  autograd::record(
      name, out, {x_in},
      [cuda_kind, name, x = x.detach(), out = out.detach(), params, device](const Tensor& grad_out) {
        check_grad(name, grad_out, device, x.dtype());
        Tensor grad_x = Tensor::empty_like(x);
        cuda::pool2d_backward(cuda_kind, x, out, layout_like_on_device(grad_out, out), params, grad_x);
        return std::vector<Tensor>{grad_x};
      });
  return out;
}

// [N, C] out in x's dtype; x's gradient in x's layout.
Tensor global_avg_pool2d_cuda(const Tensor& x_in) {
  Device device = x_in.device();
  Tensor x = kernel_layout_on_device(x_in);
  Tensor out = Tensor::empty({x.size(0), x.size(1)}, x.dtype(), device);
  cuda::global_avg_pool2d_forward(x, out);
  autograd::record("global_avg_pool2d", out, {x_in}, [x_layout = TensorLayout(x), device](const Tensor& grad_out) {
    check_grad("global_avg_pool2d backward", grad_out, device, x_layout.dtype);
    Tensor grad_x = x_layout.empty(x_layout.dtype);
    cuda::global_avg_pool2d_backward(cuda::contiguous(grad_out), grad_x);
    return std::vector<Tensor>{grad_x};
  });
  return out;
}
#endif

Tensor pool2d(cpu::PoolKind kind, const char* name, const Tensor& x_in, int64_t kernel, int64_t stride,
              int64_t padding) {
  op_device_mixed(name, {&x_in});
  DPT_CHECK(x_in.dim() == 4) << name << ": input must be 4-D [N, C, H, W], got " << shape_str(x_in.shape());
  DPT_CHECK(kernel >= 1 && stride >= 1 && padding >= 0 && padding <= kernel / 2)
      << name << ": needs kernel >= 1, stride >= 1 and 0 <= padding <= kernel / 2; got kernel " << kernel
      << ", stride " << stride << ", padding " << padding;
  const Shape& xs = x_in.shape();
  int64_t oh = (xs[2] + 2 * padding - kernel) / stride + 1, ow = (xs[3] + 2 * padding - kernel) / stride + 1;
  DPT_CHECK(xs[2] + 2 * padding >= kernel && xs[3] + 2 * padding >= kernel)
      << name << ": input " << shape_str(xs) << " with padding " << padding << " is smaller than the "
      << kernel << "x" << kernel << " window";
#ifdef DPT_WITH_CUDA
  if (x_in.device().is_cuda()) {
    Shape out_shape{xs[0], xs[1], oh, ow};
    if (shape_numel(out_shape) == 0) return Tensor::empty(out_shape, x_in.dtype(), x_in.device());
    return pool2d_cuda(kind, name, x_in, out_shape, cpu::PoolParams{kernel, stride, padding});
  }
#endif
  // Channels-last stays channels-last (output and gradient too); other strides go NCHW.
  Tensor x = cpu::onednn::in_kernel_layout(x_in);
  if (shape_numel({xs[0], xs[1], oh, ow}) == 0) return Tensor::empty({xs[0], xs[1], oh, ow});
  cpu::onednn::Layout layout = cpu::onednn::layout_of(x);
  Tensor out = cpu::onednn::empty_in({xs[0], xs[1], oh, ow}, layout);
  cpu::PoolParams params{kernel, stride, padding};
  Tensor workspace;  // opaque bytes for the backward, sized by the kernel; none for average pooling
  if (autograd::needs_recording({x_in})) {
    size_t bytes =
        cpu::pool2d_workspace_bytes(kind, xs, out.shape(), params, layout == cpu::onednn::Layout::nhwc);
    if (bytes > 0) workspace = Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)});
  }
  cpu::pool2d_forward(kind, x, params, out, workspace);
  autograd::record(name, out, {x_in},
                   [kind, x_shape = xs, params, workspace, layout](const Tensor& grad_out) {
                     check_grad("pool2d backward", grad_out, Device::cpu());
                     Tensor g = cpu::onednn::to_layout(grad_out, layout);
                     Tensor grad_x = cpu::onednn::empty_in(x_shape, layout);
                     cpu::pool2d_backward(kind, x_shape, g, params, workspace, grad_x);
                     return std::vector<Tensor>{grad_x};
                   });
  return out;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return pool2d(cpu::PoolKind::max, "max_pool2d", x, kernel, stride, padding);
}

Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return pool2d(cpu::PoolKind::avg, "avg_pool2d", x, kernel, stride, padding);
}

Tensor global_avg_pool2d(const Tensor& x_in) {
  op_device_mixed("global_avg_pool2d", {&x_in});
  DPT_CHECK(x_in.dim() == 4 && x_in.size(2) > 0 && x_in.size(3) > 0)
      << "global_avg_pool2d: input must be 4-D [N, C, H, W] with H, W >= 1, got " << shape_str(x_in.shape());
#ifdef DPT_WITH_CUDA
  if (x_in.device().is_cuda()) return global_avg_pool2d_cuda(x_in);
#endif
  Tensor x = cpu::onednn::in_kernel_layout(x_in);
  Tensor out = Tensor::empty({x.size(0), x.size(1)});
  cpu::global_avg_pool2d_forward(x, out);
  cpu::onednn::Layout layout = cpu::onednn::layout_of(x);
  autograd::record("global_avg_pool2d", out, {x_in}, [x_shape = x.shape(), layout](const Tensor& grad_out) {
    check_grad("global_avg_pool2d backward", grad_out, Device::cpu());
    Tensor grad_x = cpu::onednn::empty_in(x_shape, layout);  // the input's layout
    cpu::global_avg_pool2d_backward(grad_out.contiguous(), grad_x);
    return std::vector<Tensor>{grad_x};
  });
  return out;
}

}  // namespace dpt
