// CUDA's kernels, the twins of the CPU's: the table's entries (kernel_list.h, whose contracts
// they keep) and the helpers they share. One .cu (or, for the cuDNN/cuBLAS wrappers, .cpp)
// per family, its opening comment saying how it computes. Unless a function says otherwise:
// the tensors of one call are on one CUDA device, all f32 or all bf16 (computed in f32); 4-D
// activations are contiguous NCHW or channels-last NHWC (layout.h); work is queued on the
// device's compute stream, and nothing waits for the GPU.
#pragma once

#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::cuda {

#define DPT_KERNEL(ret, name, params) ret name params;
#include "backend/kernel_list.h"

// --- elementwise.cu: t itself when contiguous, else a contiguous copy (any strides, at most
// 8 dimensions, any dtype). The CUDA twin of Tensor::contiguous(), which copies on the CPU only.
Tensor contiguous(const Tensor& t);

// --- cast.cu: the table's copy, the kernel behind ops/cast.h (f32 <-> bf16, NCHW <-> NHWC)
// in one pass. Requires: src and dst of one shape (at most 8 dimensions), each f32 or bf16;
// src any strides, dst dense. Ensures: every element of dst = src's, converted (to bf16:
// rounded to nearest, ties to even). One flat pass when both share dense strides.
void cast_copy(const Tensor& src, const Tensor& dst);

// --- channel.cu: per-channel bias for the convolutions cuDNN's bias call does not cover
// here (bf16 or channels-last); the bias and its gradient stay f32.
// Requires: out [N, C, H, W]; bias f32 [C]. Ensures: out += bias[c], then max(0, .) when relu.
void channel_bias_add(const Tensor& out, const Tensor& bias, bool relu);
// Requires: t like `out` above; sum f32 [C]. Ensures: sum[c] = sum of t[:, c] (in double).
void channel_sum(const Tensor& t, const Tensor& sum);

// --- batch norm: f32 NCHW runs on cuDNN (batchnorm.cu: spatial batch norm for training and
// inference forward; a plain kernel for the backward of eval mode, as cuDNN's assumes batch
// statistics), with a fused ReLU as separate relu_forward / relu_backward passes; bf16 and
// NHWC run on these kernels of batchnorm_kernels.cu, which fuse it (batchnorm.cu's contracts).
namespace bn_kernels {
void forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, float momentum, float eps, bool relu, const Tensor& out,
                      const Tensor& save_mean, const Tensor& save_invstd);
void forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                       const Tensor& var, float eps, bool relu, const Tensor& out);
// Training: mean and invstd the forward saved (var undefined); inference: mean, var and eps.
void backward(const Tensor& x, const Tensor& grad_out, const Tensor& relu_out, const Tensor& weight,
              const Tensor& mean, const Tensor& invstd, const Tensor& var, float eps, bool training,
              const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias);
}  // namespace bn_kernels

}  // namespace dpt::cuda
