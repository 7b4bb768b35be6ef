// The one place ops turn away inputs their kernels cannot take: tensors on different
// devices, on a device this build has no kernels for, or of the wrong dtype; and the
// layout helpers every op shares, written once over the device's kernel table.
#pragma once

#include <initializer_list>

#include "core/tensor.h"

#include "backend/kernels.h"

namespace dpt {

// Requires: every tensor defined, of one dtype and on one device, whose kernel table this
// build has; the dtype f32, or with `mixed` (the ops that also take bf16 activations: mixed
// precision, nn/compute.h) bf16 on a device whose kernels take it (CUDA). Ensures: returns
// that device (kernels_for(device) is the op's dispatch point); else throws an Error naming
// the op, and the devices or the dtypes found.
inline Device op_device(const char* op, std::initializer_list<const Tensor*> tensors, bool mixed = false) {
  const Tensor& first = **tensors.begin();
  for (const Tensor* t : tensors) {
    DPT_CHECK(t->defined()) << op << ": undefined input";
    DPT_CHECK(t->dtype() == first.dtype())
        << op << ": inputs of different dtypes (" << dtype_name(first.dtype()) << " and "
        << dtype_name(t->dtype()) << "); cast them to one first";
    DPT_CHECK(t->device() == first.device())
        << op << ": inputs on different devices (" << first.device().str() << " and " << t->device().str()
        << "); move them to one device first";
  }
  const Kernels& k = kernels_for(first.device());  // throws for a device this build has no kernels for
  const bool bf16 = mixed && first.dtype() == DType::bf16;
  DPT_CHECK(bf16 || first.dtype() == DType::f32) << op << ": expected f32, got " << dtype_name(first.dtype());
  DPT_CHECK(!bf16 || k.bf16) << op << ": bf16 tensors run on CUDA devices only (the " << k.name
                             << " kernels are f32)";
  return first.device();
}

inline Device op_device_mixed(const char* op, std::initializer_list<const Tensor*> tensors) {
  return op_device(op, tensors, true);
}

// t itself when contiguous, else a contiguous copy on t's device (Tensor::contiguous()
// copies CPU tensors only).
inline Tensor contiguous_on_device(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  kernels_for(t.device()).copy(t, out);
  return out;
}

// What a backward keeps of a tensor, instead of the tensor, to lay a gradient out like it.
struct TensorLayout {
  Shape shape, strides;
  DType dtype = DType::f32;
  Device device;
  bool dense = true;

  TensorLayout() = default;
  explicit TensorLayout(const Tensor& t)
      : shape(t.shape()), strides(t.strides()), dtype(t.dtype()), device(t.device()), dense(t.is_dense()) {}
  // Contiguous unless dense with other strides (Tensor::empty_like's choice).
  bool contiguous() const { return !dense || strides == shape_contiguous_strides(shape); }
  // t's layout is this one (t of this shape).
  bool matches(const Tensor& t) const {
    return t.strides() == strides || (t.is_contiguous() && (contiguous() || shape_numel(shape) <= 1));
  }
  Tensor empty(DType as) const {
    return contiguous() ? Tensor::empty(shape, as, device) : Tensor::empty_strided(shape, strides, as, device);
  }
};

// t itself when of ref's dtype and layout, else a copy of t in them (contiguous when ref is
// not dense): an incoming gradient as the forward's kernels, or its input, had it.
inline Tensor layout_like_on_device(const Tensor& t, const TensorLayout& ref) {
  if (t.dtype() == ref.dtype && ref.matches(t)) return t;
  Tensor out = ref.empty(ref.dtype);
  kernels_for(t.device()).copy(t, out);
  return out;
}

// The gradient through a ReLU whose output is `out`: g where out > 0, else 0, in out's
// layout (relu and add_relu, and the ReLU that conv2d and linear fuse).
inline Tensor relu_gradient(const Tensor& out, const Tensor& g) {
  Tensor gi = Tensor::empty_like(out);
  kernels_for(out.device()).relu_backward(out, layout_like_on_device(g, TensorLayout(out)), gi);
  return gi;
}

// A tensor as the kernels take it: a 4-D one itself when contiguous or channels-last, any
// other a contiguous copy unless it is contiguous already.
inline Tensor kernel_layout_on_device(const Tensor& t) {
  if (t.dim() == 4 && t.is_channels_last()) return t;
  return contiguous_on_device(t);
}

// An uninitialised tensor of `shape` in `like`'s layout family: channels-last when like is
// (and is not also contiguous), contiguous otherwise.
inline Tensor empty_in_layout_of(const Shape& shape, DType dtype, const Tensor& like) {
  bool nhwc = like.dim() == 4 && like.is_channels_last() && !like.is_contiguous();
  return nhwc ? Tensor::empty_channels_last(shape, dtype, like.device()) : Tensor::empty(shape, dtype, like.device());
}

}  // namespace dpt
