// Whether f32 matmuls (cuBLAS) and convolutions (cuDNN) on CUDA may use TF32 tensor cores:
// inputs rounded to 10 mantissa bits (relative error about 1e-3 on a product), several
// times the f32 throughput on A100/H100. Off by default, so CUDA results match the CPU's
// to f32 rounding; DPT_CUDA_TF32=1 in the environment, or set_tf32_enabled(true), turns it on.
#pragma once

namespace dpt::cuda {

bool tf32_enabled();
// Overrides the environment for the rest of the process; convolution plans made before
// keep their choice (they are cached by shape and by this setting).
void set_tf32_enabled(bool enabled);

}  // namespace dpt::cuda
