// The CPU's kernel table (backend/kernels.h) and the kernels that fill it: oneDNN
// primitives for conv, batch norm, pooling and matmul (onednn.h), plain OpenMP loops for
// the rest. f32 only. The entries (kernel_list.h) have the table's contracts; the oneDNN
// kernels below them, overloads the entries call and tests call directly, state theirs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/kernels.h"

namespace dpt::cpu {

const Kernels& kernels();

#define DPT_KERNEL(ret, name, params) ret name params;
#include "backend/kernel_list.h"

// f(i) for every i in [0, n): one vectorised loop, split over OpenMP threads above
// ParallelAbove elements (below that, starting the threads costs more than they save).
// firstprivate: with its own copy of f a thread's stores cannot change the pointers f
// holds, so the compiler vectorises as it does the loop written out (shared, it did not).
template <int64_t ParallelAbove = 32768, class F>
void for_each_index(int64_t n, F f) {
#pragma omp parallel for simd schedule(static) if (n > ParallelAbove) firstprivate(f)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// --- conv.cpp. Activations NCHW-contiguous or channels-last, each tensor's layout read from
// its strides; weights plain OIHW; a channels-last output makes the kernels work in nhwc.
// Requires: f32; x [N, C, H, W], w [OC, C/groups, KH, KW], bias [OC] or undefined,
// out [N, OC, OH, OW] with OH = (H + 2p - d(KH-1) - 1)/s + 1.
// Ensures: out = conv(x, w) + bias, then max(0, .) when relu; every element written.
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p, bool relu,
                    const Tensor& out);
// conv2d_backward is the table's entry itself: x and grad_x in one layout.

// --- batchnorm.cpp: over N, H, W per channel by s.params (eps, training, relu; momentum
// unused). Requires: f32 s.x [N, C, H, W] NCHW or channels-last, out in its layout; s.weight,
// s.bias, s.mean, s.stat contiguous [C].
// Ensures: out = weight (x - mean) / sqrt(stat + eps) + bias (then ReLU). Training, s.mean and
// s.stat are outputs (batch mean, biased variance); else inputs. With keep_for_backward and
// relu, s.workspace is set to a new tensor holding the mask batch_norm_backward reads.
void batch_norm_forward(BatchNormSaved& s, const Tensor& out, bool keep_for_backward);
// batch_norm_backward is the table's entry itself: grad_out and grad_x in s.x's layout.

}  // namespace dpt::cpu
