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

class TensorDescriptor {
 public:
  // A fully packed tensor of a 4-D `shape` [N, C, H, W]: f32 or bf16, NCHW or (nhwc) NHWC.
  TensorDescriptor(const Shape& shape, const char* op, DType dtype = DType::f32, bool nhwc = false);
  ~TensorDescriptor();
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

class FilterDescriptor {
 public:
  // Weights of a 4-D `shape` [O, I, H, W]: f32 or bf16, OIHW or (nhwc) OHWI.
  FilterDescriptor(const Shape& shape, const char* op, DType dtype = DType::f32, bool nhwc = false);
  ~FilterDescriptor();
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

class ConvolutionDescriptor {
 public:
  // Cross-correlation (what deep-learning frameworks call convolution), f32 accumulation;
  // tf32 chooses CUDNN_DEFAULT_MATH (TF32 tensor cores allowed) over CUDNN_FMA_MATH; bf16
  // data always takes CUDNN_TENSOR_OP_MATH (tensor cores).
  ConvolutionDescriptor(int64_t padding, int64_t stride, int64_t dilation, int64_t groups, bool tf32,
                        bool bf16 = false);
  ~ConvolutionDescriptor();
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

class PoolingDescriptor {
 public:
  PoolingDescriptor(cudnnPoolingMode_t mode, int64_t kernel, int64_t stride, int64_t padding);
  ~PoolingDescriptor();
  PoolingDescriptor(const PoolingDescriptor&) = delete;
  PoolingDescriptor& operator=(const PoolingDescriptor&) = delete;
  cudnnPoolingDescriptor_t get() const { return desc_; }

 private:
  cudnnPoolingDescriptor_t desc_ = nullptr;
};

}  // namespace dpt::cuda
