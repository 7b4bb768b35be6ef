#include "core/tensor.h"

#include <cstring>

namespace dpt {

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) DPT_CHECK(d >= 0) << "tensor shape " << shape_str(shape) << " has a negative size";
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(shape_numel(shape) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = shape_contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape) {
  DPT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape))
      << "from_vector: " << values.size() << " values for shape " << shape_str(shape);
  Tensor t = empty(shape);
  std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_vector(const std::vector<int64_t>& values, const Shape& shape) {
  DPT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape))
      << "from_vector: " << values.size() << " values for shape " << shape_str(shape);
  Tensor t = empty(shape, DType::i64);
  std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

const TensorImpl& Tensor::checked() const {
  DPT_CHECK(impl_) << "use of an undefined tensor";
  return *impl_;
}

const Shape& Tensor::shape() const { return checked().shape; }
const Shape& Tensor::strides() const { return checked().strides; }
int64_t Tensor::numel() const { return shape_numel(shape()); }
DType Tensor::dtype() const { return checked().dtype; }
Device Tensor::device() const { return checked().storage->device(); }
int64_t Tensor::offset() const { return checked().offset; }
const std::shared_ptr<Storage>& Tensor::storage() const { return checked().storage; }

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  DPT_CHECK(d >= -n && d < n) << "dimension " << d << " out of range for shape " << shape_str(shape());
  return shape()[d < 0 ? d + n : d];
}

bool Tensor::is_contiguous() const {
  const TensorImpl& t = checked();
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] == 1) continue;  // the stride of a size-1 dimension never matters
    if (t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  const TensorImpl& t = checked();
  return static_cast<char*>(t.storage->data()) + t.offset * dtype_size(t.dtype);
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  const TensorImpl& t = checked();
  DPT_CHECK(shape.size() == strides.size()) << "as_strided: shape and strides differ in length";
  int64_t last = offset;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] > 0) last += (shape[i] - 1) * strides[i];
  DPT_CHECK(offset >= 0 && (shape_numel(shape) == 0 ||
                            (last + 1) * static_cast<int64_t>(dtype_size(t.dtype)) <=
                                static_cast<int64_t>(t.storage->bytes())))
      << "as_strided: view " << shape_str(shape) << " at offset " << offset << " exceeds the storage";
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage;
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = t.dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::view(const Shape& shape) const {
  DPT_CHECK(is_contiguous()) << "view of a non-contiguous tensor " << shape_str(this->shape());
  DPT_CHECK(shape_numel(shape) == numel())
      << "view: cannot view " << shape_str(this->shape()) << " as " << shape_str(shape);
  return as_strided(shape, shape_contiguous_strides(shape), offset());
}

Tensor Tensor::detach() const { return as_strided(shape(), strides(), offset()); }

namespace {

// Copies a strided CPU view into contiguous memory, innermost dimension as the inner loop.
void gather_strided(char* dst, const char* src, const Shape& shape, const Shape& strides, size_t elem) {
  int64_t n = shape_numel(shape);
  if (n == 0) return;
  size_t nd = shape.size();
  std::vector<int64_t> index(nd, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t src_offset = 0;
    for (size_t d = 0; d < nd; ++d) src_offset += index[d] * strides[d];
    std::memcpy(dst + i * elem, src + src_offset * elem, elem);
    for (size_t d = nd; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

void Tensor::copy_from(const Tensor& src) const {
  DPT_CHECK(shape() == src.shape() && dtype() == src.dtype())
      << "copy_from: " << shape_str(src.shape()) << " " << dtype_name(src.dtype()) << " into "
      << shape_str(shape()) << " " << dtype_name(dtype());
  DPT_CHECK(is_contiguous()) << "copy_from: destination must be contiguous";
  Tensor source = src;
  if (!src.is_contiguous()) {
    DPT_CHECK(src.device().is_cpu()) << "copy_from: non-contiguous CUDA source";
    source = src.contiguous();
  }
  copy_bytes(raw_data(), device(), source.raw_data(), source.device(), numel() * dtype_size(dtype()));
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  DPT_CHECK(device().is_cpu()) << "contiguous(): strided copies of CUDA tensors are not supported";
  Tensor out = empty(shape(), dtype(), device());
  gather_strided(static_cast<char*>(out.raw_data()), static_cast<const char*>(raw_data()), shape(),
                 strides(), dtype_size(dtype()));
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(Device target) const {
  if (device() == target) return *this;
  Tensor out = empty(shape(), dtype(), target);
  out.copy_from(*this);
  return out;
}

void Tensor::zero_() const {
  DPT_CHECK(is_contiguous()) << "zero_: tensor must be contiguous";
  device_backend(device().type).fill_zero(raw_data(), numel() * dtype_size(dtype()), device().index);
}

void Tensor::fill_(float value) const {
  DPT_CHECK(is_contiguous() && device().is_cpu()) << "fill_: needs a contiguous CPU tensor";
  float* p = data<float>();
  for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = value;
}

float Tensor::item() const {
  DPT_CHECK(numel() == 1) << "item(): tensor " << shape_str(shape()) << " has " << numel()
                          << " elements, expected 1";
  return to_vector()[0];
}

std::vector<float> Tensor::to_vector() const {
  Tensor host = to(Device::cpu()).contiguous();
  const float* p = host.data<float>();
  return std::vector<float>(p, p + host.numel());
}

bool Tensor::requires_grad() const { return checked().requires_grad; }

const Tensor& Tensor::set_requires_grad(bool enabled) const {
  DPT_CHECK(!enabled || dtype() == DType::f32 || dtype() == DType::bf16 || dtype() == DType::f16)
      << "only floating-point tensors can require gradients";
  impl_->requires_grad = enabled;
  return *this;
}

const Tensor& Tensor::grad() const { return checked().grad; }

void Tensor::set_grad(const Tensor& grad) const {
  DPT_CHECK(!grad.defined() || grad.shape() == shape())
      << "set_grad: gradient " << shape_str(grad.shape()) << " for tensor " << shape_str(shape());
  impl_->grad = grad;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const { return checked().grad_fn; }

}  // namespace dpt
