// cuDNN descriptors (see cudnn_desc.h).
#include "backend/cuda/cudnn_desc.h"

#include <climits>

#include "backend/cuda/check.h"
#include "core/error.h"

namespace dpt::cuda {

int cudnn_int(int64_t v, const char* op) {
  DPT_CHECK(v >= 0 && v <= INT_MAX) << op << " on cuda: size " << v << " does not fit cuDNN's int sizes";
  return static_cast<int>(v);
}

namespace {

cudnnDataType_t cudnn_type(DType dtype, const char* op) {
  DPT_CHECK(dtype == DType::f32 || dtype == DType::bf16)
      << op << " on cuda: cuDNN descriptors here take f32 or bf16, got " << dtype_name(dtype);
  return dtype == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

}  // namespace

TensorDescriptor::TensorDescriptor(const Shape& s, const char* op, DType dtype, bool nhwc) {
  DPT_CHECK(s.size() == 4) << op << " on cuda: expected a 4-D shape, got " << shape_str(s);
  DPT_CHECK(shape_numel(s) <= INT_MAX)
      << op << " on cuda: " << shape_str(s) << " has more than 2^31 - 1 elements, beyond cuDNN's limit";
  int n = cudnn_int(s[0], op), c = cudnn_int(s[1], op), h = cudnn_int(s[2], op), w = cudnn_int(s[3], op);
  cudnnDataType_t type = cudnn_type(dtype, op);  // before the create: a throw after it leaks the descriptor
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_));
  CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(desc_, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, type, n, c, h, w));
}

FilterDescriptor::FilterDescriptor(const Shape& s, const char* op, DType dtype, bool nhwc) {
  DPT_CHECK(s.size() == 4) << op << " on cuda: expected a 4-D weight, got " << shape_str(s);
  int k = cudnn_int(s[0], op), c = cudnn_int(s[1], op), h = cudnn_int(s[2], op), w = cudnn_int(s[3], op);
  cudnnDataType_t type = cudnn_type(dtype, op);
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc_));
  CUDNN_CHECK(
      cudnnSetFilter4dDescriptor(desc_, type, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, k, c, h, w));
}

ConvolutionDescriptor::ConvolutionDescriptor(int64_t padding, int64_t stride, int64_t dilation,
                                             int64_t groups, bool tf32, bool bf16) {
  const char* op = "conv2d";
  int p = cudnn_int(padding, op), s = cudnn_int(stride, op), d = cudnn_int(dilation, op);
  int g = cudnn_int(groups, op);
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc_));
  CUDNN_CHECK(
      cudnnSetConvolution2dDescriptor(desc_, p, p, s, s, d, d, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc_, g));
  cudnnMathType_t math = bf16 ? CUDNN_TENSOR_OP_MATH : tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  CUDNN_CHECK(cudnnSetConvolutionMathType(desc_, math));
}

PoolingDescriptor::PoolingDescriptor(cudnnPoolingMode_t mode, int64_t kernel, int64_t stride,
                                     int64_t padding) {
  const char* op = "pool2d";
  int k = cudnn_int(kernel, op), s = cudnn_int(stride, op), p = cudnn_int(padding, op);
  CUDNN_CHECK(cudnnCreatePoolingDescriptor(&desc_));
  CUDNN_CHECK(cudnnSetPooling2dDescriptor(desc_, mode, CUDNN_NOT_PROPAGATE_NAN, k, k, p, p, s, s));
}

}  // namespace dpt::cuda
