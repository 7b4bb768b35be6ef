// Two process-wide choices about how CUDA computes, each read from the environment once and
// overridable; convolution plans made before a change keep their choice (they are cached by
// shape and by these settings).
//
// TF32: whether f32 matmuls (cuBLAS) and convolutions (cuDNN) may use TF32 tensor cores:
// inputs rounded to 10 mantissa bits (relative error about 1e-3 on a product), several
// times the f32 throughput on A100/H100. Off by default, so CUDA results match the CPU's
// to f32 rounding; DPT_CUDA_TF32=1 in the environment, or set_tf32_enabled(true), turns it on.
//
// Deterministic convolutions: cuDNN's fastest backward algorithms may sum with atomics, so
// two runs of one step can differ in the last bits (and a ReLU input near 0 can then take
// the other side, after which runs drift apart). DPT_CUDNN_DETERMINISTIC=1, or
// set_cudnn_deterministic(true), takes only algorithms cuDNN reports as deterministic
// (PyTorch's torch.backends.cudnn.deterministic). Off by default: speed first.
#pragma once

namespace dpt::cuda {

bool tf32_enabled();
void set_tf32_enabled(bool enabled);

bool cudnn_deterministic();
void set_cudnn_deterministic(bool deterministic);

}  // namespace dpt::cuda
