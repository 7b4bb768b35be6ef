// cast_copy (see kernels.h): a flat loop where source and destination share one dense layout,
// else a walk in row-major order of the shape that addresses both through their strides.
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/strided.h"

namespace dpt::cuda {
namespace {

template <class In, class Out>
__global__ void cast_flat_kernel(const In* in, Out* out, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) out[i] = from_float<Out>(to_float(in[i]));
}

// in_dims.stride and out_dims.stride address the same row-major position in each tensor.
template <class In, class Out>
__global__ void cast_strided_kernel(const In* in, Out* out, int64_t n, Dims in_dims, Dims out_dims) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    out[offset_of(i, out_dims, out_dims.stride)] =
        from_float<Out>(to_float(in[offset_of(i, in_dims, in_dims.stride)]));
}

template <class In, class Out>
void cast_launch(const Tensor& src, const Tensor& dst, cudaStream_t stream) {
  int64_t n = dst.numel();
  const In* in = elements<In>(src);
  Out* out = elements<Out>(dst);
  if (src.strides() == dst.strides() && src.is_dense()) {
    cast_flat_kernel<<<grid_for(n), kBlock, 0, stream>>>(in, out, n);
  } else {
    Dims in_dims = dims_of(src.shape(), src.strides(), "cast");
    Dims out_dims = dims_of(dst.shape(), dst.strides(), "cast");
    cast_strided_kernel<<<grid_for(n), kBlock, 0, stream>>>(in, out, n, in_dims, out_dims);
  }
}

}  // namespace

void cast_copy(const Tensor& src, const Tensor& dst) {
  DPT_CHECK(src.shape() == dst.shape() && src.device() == dst.device() && dst.is_dense())
      << "cast on cuda: needs a dense destination of the source's shape on its device, got "
      << shape_str(src.shape()) << " on " << src.device().str() << " into " << shape_str(dst.shape())
      << " on " << dst.device().str();
  if (dst.numel() == 0) return;
  KernelScope scope(dst.device().index);
  dispatch_float(src.dtype(), "cast", [&](auto in_tag) {
    dispatch_float(dst.dtype(), "cast", [&](auto out_tag) {
      cast_launch<decltype(in_tag), decltype(out_tag)>(src, dst, scope.stream());
    });
  });
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace dpt::cuda
