// Elementwise kernels (see kernel_list.h). Three shapes of binary op, fastest first: both
// inputs read in the same order as the output (one flat loop), a scalar second operand,
// and the general broadcast, which turns each output index into two input offsets. Each
// is instantiated for f32 and bf16 (computing in f32 either way).
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/strided.h"

namespace dpt::cuda {
namespace {

template <BinaryOp op>
__device__ __forceinline__ float apply(float x, float y) {
  if constexpr (op == BinaryOp::add) return x + y;
  if constexpr (op == BinaryOp::sub) return x - y;
  if constexpr (op == BinaryOp::mul) return x * y;
  return x / y;
}

template <BinaryOp op, class T>
__global__ void binary_flat(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    out[i] = from_float<T>(apply<op>(to_float(a[i]), to_float(b[i])));
}

template <BinaryOp op, class T>
__global__ void binary_scalar(const T* a, const T* b, T* out, int64_t n) {
  const float s = to_float(b[0]);
  for (int64_t i = thread_index(); i < n; i += thread_count())
    out[i] = from_float<T>(apply<op>(to_float(a[i]), s));
}

// out contiguous; a and b read through their broadcast strides (0 where the size is 1).
template <BinaryOp op, class T>
__global__ void binary_broadcast(const T* a, const T* b, T* out, int64_t n, Dims dims, Dims b_dims) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    out[i] = from_float<T>(apply<op>(to_float(a[offset_of(i, dims, dims.stride)]),
                                     to_float(b[offset_of(i, dims, b_dims.stride)])));
}

// dims.stride holds a's broadcast strides, b_dims.stride b's (b_dims.size is unused).
void broadcast_strides(const Tensor& t, const Shape& shape, int64_t* stride) {
  size_t nd = shape.size(), lead = nd - t.shape().size();
  for (size_t d = 0; d < nd; ++d)
    stride[d] = d < lead || t.shape()[d - lead] == 1 ? 0 : t.strides()[d - lead];
}

template <BinaryOp op, class T>
void binary_launch(const Tensor& a, const Tensor& b, const Tensor& out) {
  int64_t n = out.numel();
  if (n == 0) return;
  KernelScope scope(out.device().index);
  const T* pa = elements<T>(a);
  const T* pb = elements<T>(b);
  T* po = elements<T>(out);
  bool same_dense =
      a.shape() == b.shape() && a.strides() == b.strides() && out.strides() == a.strides() && a.is_dense();
  if (same_dense || (a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous())) {
    binary_flat<op, T><<<grid_for(n), kBlock, 0, scope.stream()>>>(pa, pb, po, n);
  } else if (b.numel() == 1 && a.is_contiguous()) {
    binary_scalar<op, T><<<grid_for(n), kBlock, 0, scope.stream()>>>(pa, pb, po, n);
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
    binary_broadcast<op, T><<<grid_for(n), kBlock, 0, scope.stream()>>>(pa, pb, po, n, dims, b_dims);
  }
  DPT_CUDA_LAUNCH_CHECK();
}

template <class T>
__global__ void affine_kernel(const T* a, T* out, int64_t n, float scale, float shift) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    out[i] = from_float<T>(to_float(a[i]) * scale + shift);
}

template <class T>
__global__ void add_inplace_kernel(T* dst, const T* src, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    dst[i] = from_float<T>(to_float(dst[i]) + to_float(src[i]));
}

// One block per output element: its threads sum the `reduced` input elements that
// broadcast onto it, in double. `kept` walks the output's dimensions, `reduced` the
// summed ones; both carry the input's (contiguous) strides.
template <class T>
__global__ void sum_to_shape_kernel(const T* in, T* out, int64_t out_n, int64_t reduced_n, Dims kept,
                                    Dims reduced) {
  for (int64_t o = blockIdx.x; o < out_n; o += gridDim.x) {
    int64_t base = offset_of(o, kept, kept.stride);
    double s = 0;
    for (int64_t r = threadIdx.x; r < reduced_n; r += blockDim.x)
      s += to_float(in[base + offset_of(r, reduced, reduced.stride)]);
    s = block_sum(s);
    if (threadIdx.x == 0) out[o] = from_float<T>(static_cast<float>(s));
  }
}

template <class T>
__global__ void gather_kernel(const T* in, T* out, int64_t n, Dims dims) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) out[i] = in[offset_of(i, dims, dims.stride)];
}

}  // namespace

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_float(out.dtype(), "elementwise", [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case BinaryOp::add:
        return binary_launch<BinaryOp::add, T>(a, b, out);
      case BinaryOp::sub:
        return binary_launch<BinaryOp::sub, T>(a, b, out);
      case BinaryOp::mul:
        return binary_launch<BinaryOp::mul, T>(a, b, out);
      case BinaryOp::div:
        return binary_launch<BinaryOp::div, T>(a, b, out);
    }
  });
}

void affine(const Tensor& a, float scale, float shift, const Tensor& out) {
  DPT_CHECK(out.is_contiguous() && a.shape() == out.shape())
      << "affine on cuda: needs a contiguous output of the input's shape " << shape_str(a.shape());
  int64_t n = out.numel();
  if (n == 0) return;
  Tensor src = contiguous(a);
  KernelScope scope(out.device().index);
  dispatch_float(out.dtype(), "affine", [&](auto tag) {
    using T = decltype(tag);
    affine_kernel<<<grid_for(n), kBlock, 0, scope.stream()>>>(elements<T>(src), elements<T>(out), n, scale,
                                                              shift);
  });
  DPT_CUDA_LAUNCH_CHECK();
}

void add_inplace(const Tensor& dst, const Tensor& src) {
  DPT_CHECK(dst.shape() == src.shape() && dst.strides() == src.strides() && dst.is_dense())
      << "add_inplace on cuda: needs two dense tensors of one layout, got " << shape_str(dst.shape())
      << " and " << shape_str(src.shape());
  int64_t n = dst.numel();
  launch_typed(dst.device().index, dst.dtype(), "add_inplace", n, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    add_inplace_kernel<<<grid_for(n), kBlock, 0, stream>>>(elements<T>(dst), elements<T>(src), n);
  });
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
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  int64_t out_n = out.numel();
  if (out_n == 0) return out;
  if (reduced_n == 0) {  // an empty input sums to zeros
    out.zero_();
    return out;
  }
  KernelScope scope(t.device().index);
  unsigned blocks = static_cast<unsigned>(std::min<int64_t>(out_n, 65535));
  dispatch_float(t.dtype(), "sum_to_shape", [&](auto tag) {
    using T = decltype(tag);
    sum_to_shape_kernel<<<blocks, kBlock, 0, scope.stream()>>>(elements<T>(src), elements<T>(out), out_n,
                                                               reduced_n, kept, reduced);
  });
  DPT_CUDA_LAUNCH_CHECK();
  return out;
}

Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  int64_t n = t.numel();
  if (n == 0) return out;
  Dims dims = dims_of(t.shape(), t.strides(), "contiguous");
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
