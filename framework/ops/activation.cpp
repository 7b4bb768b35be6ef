#include "ops/activation.h"

#include "autograd/node.h"
#include "backend/cpu/activation.h"
#include "ops/device_check.h"

namespace dpt {

Tensor relu(const Tensor& x) {
  check_cpu_f32("relu", {&x});
  // Elementwise on the raw buffer: any dense layout (channels-last included) is kept.
  Tensor in = x.is_dense() ? x : x.contiguous();
  Tensor out = Tensor::empty_like(in);
  cpu::relu_forward(in.data<float>(), out.data<float>(), out.numel());
  // The output alone decides the mask (out > 0), so the input need not be kept.
  autograd::record("relu", out, {x}, [out = out.detach()](const Tensor& g) {
    Tensor gi = Tensor::empty_like(out);
    Tensor gc = g.with_layout_of(out);
    cpu::relu_backward(out.data<float>(), gc.data<float>(), gi.data<float>(), out.numel());
    return std::vector<Tensor>{gi};
  });
  return out;
}

}  // namespace dpt
