// Elementwise kernels (see elementwise.h). Three shapes of binary op, fastest first: both
// inputs read in the same order as the output (one flat loop), a scalar second operand,
// and the general broadcast, which turns each output index into two input offsets.
#include "backend/cuda/elementwise.h"

#include "backend/cuda/launch.h"

namespace dpt::cuda {
namespace {

constexpr int kMaxDims = 8;

// Sizes and element strides of up to kMaxDims dimensions, passed to kernels by value.
struct Dims {
  int nd = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
};

// Offset of the element at row-major position `index` of `d.size`, using `stride`.
__device__ inline int64_t offset_of(int64_t index, const Dims& d, const int64_t* stride) {
  int64_t offset = 0;
  for (int k = d.nd - 1; k >= 0; --k) {
    offset += (index % d.size[k]) * stride[k];
    index /= d.size[k];
  }
  return offset;
}

template <BinaryOp op>
__device__ __forceinline__ float apply(float x, float y) {
  if constexpr (op == BinaryOp::add) return x + y;
  if constexpr (op == BinaryOp::sub) return x - y;
  if constexpr (op == BinaryOp::mul) return x * y;
  return x / y;
}

template <BinaryOp op>
__global__ void binary_flat(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) out[i] = apply<op>(a[i], b[i]);
}

template <BinaryOp op>
__global__ void binary_scalar(const float* a, const float* b, float* out, int64_t n) {
  const float s = b[0];
  for (int64_t i = thread_index(); i < n; i += thread_count()) out[i] = apply<op>(a[i], s);
}

// out contiguous; a and b read through their broadcast strides (0 where the size is 1).
template <BinaryOp op>
__global__ void binary_broadcast(const float* a, const float* b, float* out, int64_t n, Dims dims,
                                 Dims b_dims) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    out[i] = apply<op>(a[offset_of(i, dims, dims.stride)], b[offset_of(i, dims, b_dims.stride)]);
}

// dims.stride holds a's broadcast strides, b_dims.stride b's (b_dims.size is unused).
void broadcast_strides(const Tensor& t, const Shape& shape, int64_t* stride) {
  size_t nd = shape.size(), lead = nd - t.shape().size();
  for (size_t d = 0; d < nd; ++d)
    stride[d] = d < lead || t.shape()[d - lead] == 1 ? 0 : t.strides()[d - lead];
}

template <BinaryOp op>
void binary_launch(const Tensor& a, const Tensor& b, const Tensor& out) {
  int64_t n = out.numel();
  if (n == 0) return;
  KernelScope scope(out.device().index);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  bool same_dense =
      a.shape() == b.shape() && a.strides() == b.strides() && out.strides() == a.strides() && a.is_dense();
  if (same_dense || (a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous())) {
    binary_flat<op><<<grid_for(n), kBlock, 0, scope.stream()>>>(pa, pb, po, n);
  } else if (b.numel() == 1 && a.is_contiguous()) {
    binary_scalar<op><<<grid_for(n), kBlock, 0, scope.stream()>>>(pa, pb, po, n);
  } else {
    const Shape& shape = out.shape();
    DPT_CHECK(shape.size() <= kMaxDims)
        << "elementwise on cuda: at most " << kMaxDims << " dimensions, got " << shape_str(shape);
    DPT_CHECK(out.is_contiguous()) << "elementwise on cuda: broadcast output must be contiguous";
    Dims dims, b_dims;
    dims.nd = b_dims.nd = static_cast<int>(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) dims.size[d] = b_dims.size[d] = shape[d];
    broadcast_strides(a, shape, dims.stride);
    broadcast_strides(b, shape, b_dims.stride);
    binary_broadcast<op><<<grid_for(n), kBlock, 0, scope.stream()>>>(pa, pb, po, n, dims, b_dims);
  }
  DPT_CUDA_LAUNCH_CHECK();
}

__global__ void affine_kernel(const float* a, float* out, int64_t n, float scale, float shift) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) out[i] = a[i] * scale + shift;
}

__global__ void add_inplace_kernel(float* dst, const float* src, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) dst[i] += src[i];
}

// One block per output element: its threads sum the `reduced` input elements that
// broadcast onto it, in double. `kept` walks the output's dimensions, `reduced` the
// summed ones; both carry the input's (contiguous) strides.
__global__ void sum_to_shape_kernel(const float* in, float* out, int64_t out_n, int64_t reduced_n, Dims kept,
                                    Dims reduced) {
  for (int64_t o = blockIdx.x; o < out_n; o += gridDim.x) {
    int64_t base = offset_of(o, kept, kept.stride);
    double s = 0;
    for (int64_t r = threadIdx.x; r < reduced_n; r += blockDim.x)
      s += in[base + offset_of(r, reduced, reduced.stride)];
    s = block_sum(s);
    if (threadIdx.x == 0) out[o] = static_cast<float>(s);
  }
}

template <class T>
__global__ void gather_kernel(const T* in, T* out, int64_t n, Dims dims) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) out[i] = in[offset_of(i, dims, dims.stride)];
}

}  // namespace

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
    case BinaryOp::add:
      return binary_launch<BinaryOp::add>(a, b, out);
    case BinaryOp::sub:
      return binary_launch<BinaryOp::sub>(a, b, out);
    case BinaryOp::mul:
      return binary_launch<BinaryOp::mul>(a, b, out);
    case BinaryOp::div:
      return binary_launch<BinaryOp::div>(a, b, out);
  }
}

void affine(const Tensor& a, float scale, float shift, const Tensor& out) {
  DPT_CHECK(out.is_contiguous() && a.shape() == out.shape())
      << "affine on cuda: needs a contiguous output of the input's shape " << shape_str(a.shape());
  int64_t n = out.numel();
  if (n == 0) return;
  Tensor src = contiguous(a);
  KernelScope scope(out.device().index);
  affine_kernel<<<grid_for(n), kBlock, 0, scope.stream()>>>(src.data<float>(), out.data<float>(), n, scale,
                                                            shift);
  DPT_CUDA_LAUNCH_CHECK();
}

void add_inplace(const Tensor& dst, const Tensor& src) {
  DPT_CHECK(dst.shape() == src.shape() && dst.strides() == src.strides() && dst.is_dense())
      << "add_inplace on cuda: needs two dense tensors of one layout, got " << shape_str(dst.shape())
      << " and " << shape_str(src.shape());
  int64_t n = dst.numel();
  if (n == 0) return;
  KernelScope scope(dst.device().index);
  add_inplace_kernel<<<grid_for(n), kBlock, 0, scope.stream()>>>(dst.data<float>(), src.data<float>(), n);
  DPT_CUDA_LAUNCH_CHECK();
}

Tensor sum_to_shape(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  const Shape& full = t.shape();
  size_t nd = full.size();
  DPT_CHECK(shape.size() <= nd && nd <= kMaxDims)
      << "sum_to_shape on cuda: cannot sum " << shape_str(full) << " to " << shape_str(shape);
  Tensor src = contiguous(t);
  Shape in_strides = shape_contiguous_strides(full);
  Dims kept, reduced;
  size_t lead = nd - shape.size();
  int64_t reduced_n = 1;
  for (size_t d = 0; d < nd; ++d) {
    int64_t target = d < lead ? 1 : shape[d - lead];
    DPT_CHECK(target == full[d] || target == 1)
        << "sum_to_shape on cuda: " << shape_str(shape) << " does not broadcast to " << shape_str(full);
    if (full[d] == 1) continue;  // contributes to neither walk
    Dims& walk = target == 1 ? reduced : kept;
    walk.size[walk.nd] = full[d];
    walk.stride[walk.nd++] = in_strides[d];
    if (target == 1) reduced_n *= full[d];
  }
  Tensor out = Tensor::empty(shape, DType::f32, t.device());
  int64_t out_n = out.numel();
  if (out_n == 0) return out;
  if (reduced_n == 0) {  // an empty input sums to zeros
    out.zero_();
    return out;
  }
  KernelScope scope(t.device().index);
  unsigned blocks = static_cast<unsigned>(std::min<int64_t>(out_n, 65535));
  sum_to_shape_kernel<<<blocks, kBlock, 0, scope.stream()>>>(src.data<float>(), out.data<float>(), out_n,
                                                             reduced_n, kept, reduced);
  DPT_CUDA_LAUNCH_CHECK();
  return out;
}

Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  DPT_CHECK(t.dim() <= kMaxDims) << "contiguous on cuda: at most " << kMaxDims << " dimensions, got "
                                 << shape_str(t.shape());
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  int64_t n = t.numel();
  if (n == 0) return out;
  Dims dims;
  dims.nd = static_cast<int>(t.dim());
  for (int d = 0; d < dims.nd; ++d) {
    dims.size[d] = t.shape()[d];
    dims.stride[d] = t.strides()[d];
  }
  KernelScope scope(t.device().index);
  switch (dtype_size(t.dtype())) {
    case 2:
      gather_kernel<<<grid_for(n), kBlock, 0, scope.stream()>>>(
          static_cast<const uint16_t*>(t.raw_data()), static_cast<uint16_t*>(out.raw_data()), n, dims);
      break;
    case 4:
      gather_kernel<<<grid_for(n), kBlock, 0, scope.stream()>>>(
          static_cast<const uint32_t*>(t.raw_data()), static_cast<uint32_t*>(out.raw_data()), n, dims);
      break;
    default:
      gather_kernel<<<grid_for(n), kBlock, 0, scope.stream()>>>(
          static_cast<const uint64_t*>(t.raw_data()), static_cast<uint64_t*>(out.raw_data()), n, dims);
  }
  DPT_CUDA_LAUNCH_CHECK();
  return out;
}

}  // namespace dpt::cuda
