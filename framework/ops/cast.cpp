// cast and cast_reuse (see cast.h): the device's copy kernel converts dtype and layout at
// once (backend/cuda/cast.cu on CUDA; on the CPU, where everything is f32, a layout copy).
#include "ops/cast.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/device_check.h"

namespace dpt {
namespace {

void check_dtype(DType dtype, Device device) {
  DPT_CHECK(dtype == DType::f32 || dtype == DType::bf16)
      << "cast: expected f32 or bf16, got " << dtype_name(dtype);
  DPT_CHECK(dtype == DType::f32 || kernels_for(device).bf16)
      << "cast: bf16 tensors live on CUDA devices only (the " << kernels_for(device).name << " kernels are f32)";
}

void record_cast(const Tensor& x, const Tensor& out) {
  autograd::record("cast", out, {x}, [like = TensorLayout(x)](const Tensor& g) {
    return std::vector<Tensor>{layout_like_on_device(g, like)};
  });
}

}  // namespace

Tensor cast(const Tensor& x, DType dtype, MemoryFormat format) {
  DPT_CHECK(x.defined()) << "cast: undefined input";
  check_dtype(dtype, x.device());
  check_dtype(x.dtype(), x.device());
  DPT_CHECK(format != MemoryFormat::channels_last || x.dim() == 4)
      << "cast: channels-last needs a 4-D tensor, got " << shape_str(x.shape());
  bool layout_ok = format == MemoryFormat::preserve     ? x.is_dense()
                   : format == MemoryFormat::contiguous ? x.is_contiguous()
                                                        : x.is_channels_last();
  if (dtype == x.dtype() && layout_ok) return x;
  Tensor out = format == MemoryFormat::channels_last
                   ? Tensor::empty_channels_last(x.shape(), dtype, x.device())
               : format == MemoryFormat::contiguous ? Tensor::empty(x.shape(), dtype, x.device())
                                                    : TensorLayout(x).empty(dtype);  // x's strides when dense
  kernels_for(out.device()).copy(x, out);  // dtype and layout at once
  record_cast(x, out);
  return out;
}

void cast_into(const Tensor& src, const Tensor& dst) {
  DPT_CHECK(src.defined() && dst.defined() && src.shape() == dst.shape() && src.device() == dst.device() &&
            dst.is_dense())
      << "cast_into: needs a dense destination of the source's shape on its device";
  check_dtype(src.dtype(), src.device());
  check_dtype(dst.dtype(), dst.device());
  kernels_for(dst.device()).copy(src, dst);
}

Tensor cast_reuse(const Tensor& x, const Tensor& converted) {
  DPT_CHECK(x.defined() && converted.defined() && x.shape() == converted.shape() &&
            x.device() == converted.device())
      << "cast_reuse: the converted tensor must have x's shape and device";
  Tensor out = converted.detach();  // a new handle: this forward's tape entry, the same bytes
  record_cast(x, out);
  return out;
}

}  // namespace dpt
