// shortcut_pad (ResNet's option-A shortcut) and its backward, side by side; the kernels
// are the device's (plain loops on the CPU, backend/cuda/shortcut_pad.cu on CUDA). NCHW or
// channels-last, f32 or bf16: the output and the gradient keep x's.
#include "ops/shortcut_pad.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/device_check.h"

namespace dpt {

Tensor shortcut_pad(const Tensor& x_in, int64_t out_channels, int64_t stride) {
  op_device_mixed("shortcut_pad", {&x_in});
  DPT_CHECK(x_in.dim() == 4) << "shortcut_pad: input must be 4-D [N, C, H, W], got "
                             << shape_str(x_in.shape());
  DPT_CHECK(stride >= 1) << "shortcut_pad: stride must be >= 1, got " << stride;
  DPT_CHECK(out_channels >= x_in.size(1))
      << "shortcut_pad: input " << shape_str(x_in.shape()) << " has " << x_in.size(1)
      << " channels, more than out_channels " << out_channels;
  const Kernels& k = kernels_for(x_in.device());
  Tensor x = kernel_layout_on_device(x_in);
  int64_t n = x.size(0), h = x.size(2), w = x.size(3);
  Tensor out = empty_in_layout_of({n, out_channels, (h + stride - 1) / stride, (w + stride - 1) / stride}, x.dtype(), x);
  k.shortcut_pad_forward(x, stride, out);
  autograd::record("shortcut_pad", out, {x_in},
                   [&k, x_like = TensorLayout(x), out_like = TensorLayout(out), stride](const Tensor& g) {
                     Tensor gx = x_like.empty(x_like.dtype);
                     k.shortcut_pad_backward(layout_like_on_device(g, out_like), stride, gx);
                     return std::vector<Tensor>{gx};
                   });
  return out;
}

}  // namespace dpt
