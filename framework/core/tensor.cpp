#include "core/tensor.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <tuple>
#include <utility>

namespace dpt {
namespace {

bool strides_contiguous(std::span<const int64_t> shape, std::span<const int64_t> strides) {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;  // a size-1 dimension's stride never matters
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

// NHWC: contiguous with the dimensions listed in the order N, H, W, C.
bool strides_channels_last(const Shape& shape, const Shape& strides) {
  return shape.size() == 4 && strides_contiguous(std::array{shape[0], shape[2], shape[3], shape[1]},
                                                 std::array{strides[0], strides[2], strides[3], strides[1]});
}

// Dense: sorted by stride, each stride is the product of the sizes below it.
bool strides_dense(const Shape& shape, const Shape& strides) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the size > 1 dims
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return true;
    if (shape[i] > 1) dims.emplace_back(strides[i], shape[i]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

Shape channels_last_strides(const Shape& shape) {
  DPT_CHECK(shape.size() == 4) << "channels-last needs a 4-D shape, got " << shape_str(shape);
  int64_t c = shape[1], h = shape[2], w = shape[3];
  return {h * w * c, 1, w * c, c};
}

// dst[c * rows + r] = src[r * cols + c]: one image between NHWC ([HW, C]) and NCHW
// ([C, HW]). Square tiles keep both the reads and the writes within a few cache lines.
void transpose_plane(const float* src, float* dst, int64_t rows, int64_t cols) {
  constexpr int64_t tile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += tile) {
    int64_t r1 = std::min(rows, r0 + tile);
    for (int64_t c0 = 0; c0 < cols; c0 += tile) {
      int64_t c1 = std::min(cols, c0 + tile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * rows + r] = src[r * cols + c];
    }
  }
}

// Every image of a 4-D f32 tensor transposed between [rows, cols] and [cols, rows].
void transpose_images(const float* src, float* dst, int64_t images, int64_t rows, int64_t cols) {
  int64_t per_image = rows * cols;
#pragma omp parallel for schedule(static) if (images * per_image > 32768)
  for (int64_t n = 0; n < images; ++n) transpose_plane(src + n * per_image, dst + n * per_image, rows, cols);
}

// Element-by-element copy between two strided CPU views, innermost dimension fastest.
void copy_elementwise(char* dst, const Shape& dst_strides, const char* src, const Shape& src_strides,
                      const Shape& shape, size_t elem) {
  int64_t n = shape_numel(shape);
  size_t nd = shape.size();
  std::vector<int64_t> index(nd, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t s = 0, d = 0;
    for (size_t k = 0; k < nd; ++k) {
      s += index[k] * src_strides[k];
      d += index[k] * dst_strides[k];
    }
    std::memcpy(dst + d * elem, src + s * elem, elem);
    for (size_t k = nd; k-- > 0;) {
      if (++index[k] < shape[k]) break;
      index[k] = 0;
    }
  }
}

// Copies a strided CPU view into another of the same shape. Same dense layout: one
// memcpy; NHWC <-> NCHW of f32 (the activations' layout change, e.g. before flatten):
// a tiled transpose per image; anything else: element by element.
void copy_strided(char* dst, const Shape& dst_strides, const char* src, const Shape& src_strides,
                  const Shape& shape, size_t elem) {
  int64_t n = shape_numel(shape);
  if (n == 0) return;
  bool dst_dense = strides_dense(shape, dst_strides);
  if (dst_dense && (dst_strides == src_strides ||
                    (strides_contiguous(shape, dst_strides) && strides_contiguous(shape, src_strides)))) {
    std::memcpy(dst, src, n * elem);
    return;
  }
  if (elem == sizeof(float) && shape.size() == 4) {
    int64_t hw = shape[2] * shape[3], c = shape[1];
    auto* d = reinterpret_cast<float*>(dst);
    const auto* s = reinterpret_cast<const float*>(src);
    if (strides_channels_last(shape, src_strides) && strides_contiguous(shape, dst_strides))
      return transpose_images(s, d, shape[0], hw, c);
    if (strides_contiguous(shape, src_strides) && strides_channels_last(shape, dst_strides))
      return transpose_images(s, d, shape[0], c, hw);
  }
  copy_elementwise(dst, dst_strides, src, src_strides, shape, elem);
}

// `out` holding a copy of `src`.
Tensor copied(const Tensor& out, const Tensor& src) {
  out.copy_from(src);
  return out;
}

Tensor view_of(std::shared_ptr<Storage> storage, int64_t offset, const Shape& shape, const Shape& strides,
               DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  std::tie(impl->storage, impl->offset, impl->shape, impl->strides, impl->dtype) =
      std::tie(storage, offset, shape, strides, dtype);
  return Tensor(std::move(impl));
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) DPT_CHECK(d >= 0) << "tensor shape " << shape_str(shape) << " has a negative size";
  return wrap(std::make_shared<Storage>(shape_numel(shape) * dtype_size(dtype), device), shape, dtype);
}

Tensor Tensor::wrap(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype) {
  DPT_CHECK(storage && storage->bytes() == shape_numel(shape) * dtype_size(dtype))
      << "Tensor::wrap: storage of " << (storage ? storage->bytes() : 0) << " bytes for shape "
      << shape_str(shape) << " of " << dtype_name(dtype);
  return view_of(std::move(storage), 0, shape, shape_contiguous_strides(shape), dtype);
}

Tensor Tensor::empty_strided(const Shape& shape, const Shape& strides, DType dtype, Device device) {
  DPT_CHECK(shape.size() == strides.size() && strides_dense(shape, strides))
      << "empty_strided: strides " << shape_str(strides) << " are not dense for shape " << shape_str(shape);
  Tensor t = empty(shape, dtype, device);
  t.impl_->strides = strides;
  return t;
}

Tensor Tensor::empty_like(const Tensor& like) {
  if (like.is_contiguous() || !like.is_dense()) return empty(like.shape(), like.dtype(), like.device());
  return empty_strided(like.shape(), like.strides(), like.dtype(), like.device());
}

Tensor Tensor::empty_channels_last(const Shape& shape, DType dtype, Device device) {
  return empty_strided(shape, channels_last_strides(shape), dtype, device);
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

template <class T>
Tensor tensor_of(const std::vector<T>& values, const Shape& shape) {
  DPT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape))
      << "from_vector: " << values.size() << " values for shape " << shape_str(shape);
  Tensor t = Tensor::empty(shape, dtype_of<T>());
  // memcpy from an empty vector's data() (null) is undefined even for 0 bytes (UBSan).
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape) {
  return tensor_of(values, shape);
}
Tensor Tensor::from_vector(const std::vector<int64_t>& values, const Shape& shape) {
  return tensor_of(values, shape);
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
  return strides_contiguous(t.shape, t.strides);
}

bool Tensor::is_dense() const {
  const TensorImpl& t = checked();
  return strides_dense(t.shape, t.strides);
}

bool Tensor::is_channels_last() const {
  const TensorImpl& t = checked();
  return strides_channels_last(t.shape, t.strides);
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
  DPT_CHECK(offset >= 0 &&
            (shape_numel(shape) == 0 || (last + 1) * static_cast<int64_t>(dtype_size(t.dtype)) <=
                                            static_cast<int64_t>(t.storage->bytes())))
      << "as_strided: view " << shape_str(shape) << " at offset " << offset << " exceeds the storage";
  return view_of(t.storage, offset, shape, strides, t.dtype);
}

Tensor Tensor::view(const Shape& shape) const {
  DPT_CHECK(is_contiguous()) << "view of a non-contiguous tensor " << shape_str(this->shape());
  DPT_CHECK(shape_numel(shape) == numel())
      << "view: cannot view " << shape_str(this->shape()) << " as " << shape_str(shape);
  return as_strided(shape, shape_contiguous_strides(shape), offset());
}

Tensor Tensor::detach() const { return as_strided(shape(), strides(), offset()); }

void Tensor::copy_from(const Tensor& src) const {
  DPT_CHECK(shape() == src.shape() && dtype() == src.dtype())
      << "copy_from: " << shape_str(src.shape()) << " " << dtype_name(src.dtype()) << " into "
      << shape_str(shape()) << " " << dtype_name(dtype());
  const size_t bytes = numel() * dtype_size(dtype());
  if (device().is_cpu() && src.device().is_cpu()) {
    DPT_CHECK(is_dense()) << "copy_from: destination must be dense";
    copy_strided(static_cast<char*>(raw_data()), strides(), static_cast<const char*>(src.raw_data()),
                 src.strides(), shape(), dtype_size(dtype()));
  } else if (strides() == src.strides() && is_dense() && src.is_dense()) {  // the bytes as they are
    copy_bytes(raw_data(), device(), src.raw_data(), src.device(), bytes);
  } else if (src.is_contiguous() || src.device().is_cpu()) {
    DPT_CHECK(is_contiguous()) << "copy_from: a destination on another device must be contiguous";
    const Tensor source = src.contiguous();
    copy_bytes(raw_data(), device(), source.raw_data(), source.device(), bytes);
  } else {
    // A dense device tensor in another layout (channels-last): its bytes as they are into
    // host memory, then the layout change there.
    DPT_CHECK(is_contiguous()) << "copy_from: a destination on another device must be contiguous";
    DPT_CHECK(src.is_dense() && device().is_cpu()) << "copy_from: a CUDA source " << shape_str(src.shape())
                                                   << " that is neither dense nor going to the CPU";
    Tensor staged = empty_strided(src.shape(), src.strides(), src.dtype(), Device::cpu());
    staged.copy_from(src);
    return copy_from(staged);
  }
  storage()->bump_version();
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  DPT_CHECK(device().is_cpu()) << "contiguous(): strided copies of CUDA tensors are not supported";
  return clone();
}

Tensor Tensor::clone() const { return copied(empty(shape(), dtype(), device()), *this); }

Tensor Tensor::clone_preserving_strides() const { return copied(empty_like(*this), *this); }

Tensor Tensor::channels_last() const {
  if (is_channels_last()) return *this;
  return copied(empty_channels_last(shape(), dtype(), device()), *this);
}

Tensor Tensor::to(Device target) const {
  if (device() == target) return *this;
  return copied(empty(shape(), dtype(), target), *this);
}

void Tensor::zero_() const {
  DPT_CHECK(is_dense()) << "zero_: tensor must be dense";
  device_backend(device().type).fill_zero(raw_data(), numel() * dtype_size(dtype()), device().index);
  storage()->bump_version();
}

void Tensor::fill_(float value) const {
  DPT_CHECK(is_dense() && device().is_cpu()) << "fill_: needs a dense CPU tensor";
  float* p = data<float>();
  for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = value;
  storage()->bump_version();
}

float Tensor::item() const {
  DPT_CHECK(numel() == 1) << "item(): tensor " << shape_str(shape()) << " has " << numel()
                          << " elements, expected 1";
  return to_vector()[0];
}

std::vector<float> Tensor::to_vector() const {
  Tensor host = to(Device::cpu()).contiguous();
  if (host.dtype() == DType::bf16) {
    const auto* bits = static_cast<const uint16_t*>(host.raw_data());
    std::vector<float> out(host.numel());
    for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(bits[i]);
    return out;
  }
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
