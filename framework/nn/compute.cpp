// The weight cache (see compute.h).
#include "nn/compute.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "ops/cast.h"

namespace dpt::nn {

Tensor WeightCache::get(const Tensor& weight, const Compute& compute) {
  MemoryFormat format =
      compute.channels_last && weight.dim() == 4 ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  bool layout_ok =
      converted_.defined() &&
      (format == MemoryFormat::channels_last ? converted_.is_channels_last() : converted_.is_contiguous());
  bool same_form = layout_ok && converted_.dtype() == compute.dtype && converted_.shape() == weight.shape() &&
                   converted_.device() == weight.device();
  const std::shared_ptr<Storage>& storage = weight.storage();
  bool fresh = same_form && storage_.lock() == storage && version_ == storage->version();
  // A captured step (cuda_graphs) always records the cast: each replay must remake the copy
  // from the weights the replay before it updated, whatever the host knew at the capture
  // (an evaluation between the warm-up and the capture leaves the cache fresh then).
  if (kernels_for(weight.device()).capturing(weight.device().index)) fresh = false;
  if (!fresh) {
    autograd::NoGrad no_grad;
    if (same_form && converted_.storage() != storage)
      cast_into(weight, converted_);  // the same buffer: its address stays put (CUDA graphs replay it)
    else
      converted_ = cast(weight.detach(), compute.dtype, format);
    storage_ = storage;
    version_ = storage->version();
  }
  return cast_reuse(weight, converted_);
}

}  // namespace dpt::nn
