// Tensor: a strided view of shared storage, with the autograd fields a tape needs.
// Copying a Tensor copies a handle: both refer to the same TensorImpl, so setting .grad
// through one is seen through the other (parameters are shared this way between a
// Module, its optimizer and DDP).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace dpt {

namespace autograd {
struct Node;
}

struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // New contiguous tensors. empty() leaves the memory uninitialised.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  // New tensor with the given strides. Requires: dense strides (every element of a
  // numel-sized buffer reached exactly once), e.g. a permutation of row-major strides.
  static Tensor empty_strided(const Shape& shape, const Shape& strides, DType dtype = DType::f32,
                              Device device = Device::cpu());
  // New tensor with the shape, dtype, device and (when dense) the strides of `like`;
  // contiguous when `like` is not dense. Uninitialised.
  static Tensor empty_like(const Tensor& like);
  // New 4-D [N, C, H, W] tensor stored channels-last (NHWC): strides [HWC, 1, WC, C].
  static Tensor empty_channels_last(const Shape& shape, DType dtype = DType::f32,
                                    Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  // A contiguous tensor over all of `storage` (e.g. memory another owner keeps alive).
  // Requires: storage holds exactly numel(shape) elements of dtype.
  static Tensor wrap(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype);
  static Tensor full(const Shape& shape, float value);
  // Copies `values` (row-major) into a new CPU tensor; values.size() must equal the numel.
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  static Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // d < 0 counts from the end
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  int64_t offset() const;  // in elements, into the storage
  const std::shared_ptr<Storage>& storage() const;
  bool is_contiguous() const;
  // Elements fill exactly numel() consecutive slots from offset(), in some dimension
  // order (row-major and channels-last are both dense; slices and broadcasts are not).
  bool is_dense() const;
  // 4-D and stored NHWC: strides [H*W*C, 1, W*C, C], size-1 dimensions ignored (so a
  // tensor with C == 1 or H == W == 1 is both contiguous and channels-last).
  bool is_channels_last() const;

  // Pointer to element 0 of this view. T must match dtype().
  template <class T>
  T* data() const {
    DPT_CHECK(dtype() == dtype_of<T>()) << "tensor of dtype " << dtype_name(dtype()) << " read as "
                                        << dtype_name(dtype_of<T>());
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;

  // Views share storage and are not recorded by autograd (ops/shape.h has the
  // differentiable reshape). view() needs a contiguous tensor.
  Tensor view(const Shape& shape) const;
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  // This tensor if contiguous, else a contiguous copy (not recorded by autograd).
  Tensor contiguous() const;
  Tensor clone() const;  // contiguous copy, no autograd history
  // Copy with the same strides when dense (contiguous otherwise), no autograd history.
  Tensor clone_preserving_strides() const;
  // This tensor if channels-last, else a channels-last copy (4-D). Not recorded.
  Tensor channels_last() const;
  Tensor detach() const;  // same storage, no autograd history
  Tensor to(Device device) const;  // copy to another device (this tensor if already there)
  // Same shape and dtype; any devices. Strided sources and dense strided destinations
  // are copied on the CPU; two dense tensors with the same strides anywhere (channels-last
  // on CUDA, say); otherwise, with a CUDA side, the destination must be contiguous, and
  // a CUDA source in another layout must be dense and go to the CPU (staged there).
  void copy_from(const Tensor& src) const;
  void zero_() const;  // dense tensors
  void fill_(float value) const;  // f32 CPU tensors
  float item() const;  // one-element f32 tensor
  std::vector<float> to_vector() const;  // f32 or bf16 (widened), any device, row-major

  // Autograd. A tensor needs a gradient if it is a leaf marked requires_grad, or the
  // output of an op recorded on the tape.
  bool requires_grad() const;
  const Tensor& set_requires_grad(bool enabled) const;
  const Tensor& grad() const;
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  // Runs the backward pass from this tensor (autograd/engine.cpp). With no argument the
  // tensor must have one element and its gradient is 1.
  void backward(const Tensor& grad_output = Tensor()) const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  const TensorImpl& checked() const;
  std::shared_ptr<TensorImpl> impl_;
};

// Called after a leaf's gradient has been accumulated into .grad; DDP launches bucket
// all-reduces from here.
using PostAccumulateHook = std::function<void(const Tensor& leaf)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;
  Shape shape;
  Shape strides;
  DType dtype = DType::f32;

  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;          // set on op outputs
  std::shared_ptr<autograd::Node> grad_accumulator;  // set on leaves, made on first use
  std::vector<PostAccumulateHook> post_accumulate_hooks;
};

}  // namespace dpt
