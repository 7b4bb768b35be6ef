// RAII owners of the cuDNN descriptors the conv, batch-norm and pooling wrappers build,
// f32 NCHW unless told otherwise (convolutions also take bf16 and NHWC). cuDNN's legacy
// API takes int sizes: a size that does not fit is an Error naming the op, never a silent
// truncation.
#pragma once

#include <cudnn.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/shape.h"

namespace dpt::cuda {

// Returns v as an int; Error naming `op` when it does not fit.
int cudnn_int(int64_t v, const char* op);

// Owns one cuDNN descriptor, destroyed with `destroy` (its status ignored: a destructor
// cannot throw, and destroying a descriptor only fails for a null one).
template <class T, cudnnStatus_t (*destroy)(T)>
class Descriptor {
 public:
  Descriptor() = default;
  ~Descriptor() { (void)destroy(desc_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  T get() const { return desc_; }

 protected:
  T desc_ = nullptr;
};

struct TensorDescriptor : Descriptor<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor> {
  // A fully packed tensor of a 4-D `shape` [N, C, H, W]: f32 or bf16, NCHW or (nhwc) NHWC.
  TensorDescriptor(const Shape& shape, const char* op, DType dtype = DType::f32, bool nhwc = false);
};

struct FilterDescriptor : Descriptor<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor> {
  // Weights of a 4-D `shape` [O, I, H, W]: f32 or bf16, OIHW or (nhwc) OHWI.
  FilterDescriptor(const Shape& shape, const char* op, DType dtype = DType::f32, bool nhwc = false);
};

struct ConvolutionDescriptor : Descriptor<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor> {
  // Cross-correlation (what deep-learning frameworks call convolution), f32 accumulation;
  // tf32 chooses CUDNN_DEFAULT_MATH (TF32 tensor cores allowed) over CUDNN_FMA_MATH; bf16
  // data always takes CUDNN_TENSOR_OP_MATH (tensor cores).
  ConvolutionDescriptor(int64_t padding, int64_t stride, int64_t dilation, int64_t groups, bool tf32,
                        bool bf16 = false);
};

struct PoolingDescriptor : Descriptor<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor> {
  PoolingDescriptor(cudnnPoolingMode_t mode, int64_t kernel, int64_t stride, int64_t padding);
};

}  // namespace dpt::cuda
