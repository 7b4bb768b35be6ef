#include "ops/elementwise.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/device_check.h"

namespace dpt {
namespace {

Shape broadcast_shape(const Shape& a, const Shape& b) {
  size_t nd = std::max(a.size(), b.size());
  Shape out(nd);
  for (size_t i = 0; i < nd; ++i) {
    int64_t da = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    int64_t db = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    DPT_CHECK(da == db || da == 1 || db == 1)
        << "shapes " << shape_str(a) << " and " << shape_str(b) << " do not broadcast";
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor sum_to_shape(const Tensor& t, const Shape& shape) { return kernels_for(t.device()).sum_to_shape(t, shape); }

Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b) {
  Device device = op_device_mixed("elementwise", {&a, &b});
  // Equal shapes and equal dense strides (two channels-last activations, say): the op
  // runs on the raw buffers and the output keeps that layout. Otherwise it is contiguous.
  Tensor out = a.shape() == b.shape() && a.strides() == b.strides() && a.is_dense()
                   ? Tensor::empty_like(a)
                   : Tensor::empty(broadcast_shape(a.shape(), b.shape()), a.dtype(), device);
  kernels_for(device).binary(op, a, b, out);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::add, a, b);
  autograd::record("add", out, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return std::vector<Tensor>{sum_to_shape(g, sa), sum_to_shape(g, sb)};
  });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::sub, a, b);
  autograd::record("sub", out, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    Tensor neg = Tensor::empty(g.shape(), g.dtype(), g.device());
    kernels_for(g.device()).affine(g, -1.0f, 0.0f, neg);
    return std::vector<Tensor>{sum_to_shape(g, sa), sum_to_shape(neg, sb)};
  });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::mul, a, b);
  bool need_a = a.requires_grad(), need_b = b.requires_grad();
  autograd::record("mul", out, {a, b}, [a = a.detach(), b = b.detach(), need_a, need_b](const Tensor& g) {
    std::vector<Tensor> grads(2);
    if (need_a) grads[0] = sum_to_shape(binary_forward(BinaryOp::mul, g, b), a.shape());
    if (need_b) grads[1] = sum_to_shape(binary_forward(BinaryOp::mul, g, a), b.shape());
    return grads;
  });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::div, a, b);
  bool need_a = a.requires_grad(), need_b = b.requires_grad();
  autograd::record("div", out, {a, b},
                   [b = b.detach(), out = out.detach(), sa = a.shape(), need_a, need_b](const Tensor& g) {
                     std::vector<Tensor> grads(2);
                     Tensor g_over_b = binary_forward(BinaryOp::div, g, b);
                     if (need_a) grads[0] = sum_to_shape(g_over_b, sa);
                     if (need_b) {  // d(a/b)/db = -(a/b)/b
                       Tensor t = binary_forward(BinaryOp::mul, g_over_b, out);
                       kernels_for(t.device()).affine(t, -1.0f, 0.0f, t);
                       grads[1] = sum_to_shape(t, b.shape());
                     }
                     return grads;
                   });
  return out;
}

Tensor affine(const Tensor& a, float scale, float shift) {
  Device device = op_device_mixed("affine", {&a});
  Tensor out = Tensor::empty(a.shape(), a.dtype(), device);
  kernels_for(device).affine(a, scale, shift, out);
  autograd::record("affine", out, {a}, [scale](const Tensor& g) {
    Tensor ga = Tensor::empty(g.shape(), g.dtype(), g.device());
    kernels_for(g.device()).affine(g, scale, 0.0f, ga);
    return std::vector<Tensor>{ga};
  });
  return out;
}

Tensor mul(const Tensor& a, float scale) { return affine(a, scale, 0.0f); }

}  // namespace dpt
