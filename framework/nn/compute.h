// How a model's layers compute on CUDA (the `precision` and `channels_last` keys):
// convolutions and matmuls in bf16, activations NHWC. Parameters stay f32; Conv2d and
// Linear cast their input and use a bf16 copy of their weight (the WeightCache), remade
// only after the weight was written. Other layers follow their input's dtype and layout.
// bf16 needs no loss scaling, unlike f16: it keeps f32's 8-bit exponent.
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace dpt::nn {

struct Compute {
  DType dtype = DType::f32;    // f32, or bf16 (CUDA only)
  bool channels_last = false;  // NHWC activations and OHWI conv weights
  bool active() const { return dtype != DType::f32 || channels_last; }
};

class WeightCache {
 public:
  // Requires: `weight` a parameter on the device the layer runs on. Ensures: its values in
  // compute.dtype (and OHWI when 4-D and channels_last), recorded on the tape as a cast of
  // `weight` so the gradient reaches weight.grad as f32; remade (in place when the shape
  // allows) only when weight's storage was replaced or written since the last call.
  Tensor get(const Tensor& weight, const Compute& compute);

 private:
  Tensor converted_;
  std::weak_ptr<Storage> storage_;  // the weight's storage the copy was made from
  uint64_t version_ = 0;            // and its version then
};

}  // namespace dpt::nn
