// The CPU's kernel table (backend/kernels.h) and the kernels that fill it: oneDNN
// primitives for conv, batch norm, pooling and matmul (onednn.h), plain OpenMP loops for
// the rest. f32 only. An entry named as in the table has the table's contract; the
// oneDNN kernels below it, which tests also call directly, state theirs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/kernels.h"

namespace dpt::cpu {

const Kernels& kernels();

// --- table entries (elementwise.cpp, loss.cpp, optim.cpp, shortcut_pad.cpp,
// sync_batchnorm.cpp): contiguous f32 unless the table allows other layouts.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void affine(const Tensor& a, float scale, float shift, const Tensor& out);
void add_inplace(const Tensor& dst, const Tensor& src);
Tensor sum_to_shape(const Tensor& t, const Shape& shape);
// Added in double in fixed-size chunks in chunk order: the same bits whatever the thread count.
void sum_scaled(const Tensor& x, double scale, const Tensor& out);
void fill_scaled(const Tensor& out, const Tensor& scalar, float scale);
void relu_forward(const Tensor& x, const Tensor& out);
void add_relu_forward(const Tensor& a, const Tensor& b, const Tensor& out);
void relu_backward(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in);
// The mask is drawn serially from rng, so runs repeat whatever the thread count.
void dropout_forward(const Tensor& x, float p, Rng& rng, const Tensor& mask, const Tensor& out);
void sum_rows(const Tensor& t, const Tensor& out);
void global_avg_pool2d_forward(const Tensor& x, const Tensor& out);
void global_avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x);
void shortcut_pad_forward(const Tensor& x, int64_t stride, const Tensor& out);
void shortcut_pad_backward(const Tensor& grad_out, int64_t stride, const Tensor& grad_x);
void sync_bn_sum(const Tensor& x, const Tensor& stats);
void sync_bn_sum_sq_dev(const Tensor& x, const Tensor& stats, const Tensor& sq);
void sync_bn_finish_stats(const Tensor& stats, const Tensor& sq, float eps, float momentum,
                          const Tensor& running_mean, const Tensor& running_var, const Tensor& saved);
void sync_bn_normalize(const Tensor& x, const Tensor& saved, const Tensor& weight, const Tensor& bias,
                       const Tensor& xhat, const Tensor& out);
void sync_bn_grad_sums(const Tensor& grad_out, const Tensor& xhat, const Tensor& sums,
                       const Tensor& grad_bias, const Tensor& grad_weight);
void sync_bn_grad_input(const Tensor& grad_out, const Tensor& xhat, const Tensor& weight, const Tensor& saved,
                        const Tensor& stats, const Tensor& sums, const Tensor& grad_x);
int64_t first_bad_label(const Tensor& labels, int64_t classes, int64_t* label);
void log_softmax_forward(const Tensor& x, const Tensor& out);
void log_softmax_backward(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in);
void nll_forward(const Tensor& log_probs, const Tensor& labels, const Tensor& loss);
void nll_backward(const Tensor& labels, const Tensor& grad_loss, const Tensor& grad_in);
void cross_entropy_forward(const Tensor& logits, const Tensor& labels, float smoothing,
                           const Tensor& log_probs, const Tensor& loss);
void cross_entropy_backward(const Tensor& log_probs, const Tensor& labels, float smoothing,
                            const Tensor& grad_loss, const Tensor& grad);
int64_t count_correct(const Tensor& logits, const Tensor& labels);
void eval_totals_add(const Tensor& totals, const Tensor& loss, const Tensor& logits, const Tensor& labels);
// The *_on_device values are host memory here, read when the update runs.
void sgd_update(const std::vector<SgdSlot>& slots, int device, float lr, float weight_decay, float momentum,
                bool nesterov, const float* lr_on_device);
void adamw_update(const std::vector<AdamWSlot>& slots, int device, float lr, float decay, float beta1,
                  float beta2, float eps, float c1, float c2, const float* scalars_on_device);
void ema_update(const Tensor& average, const Tensor& current, float decay, const float* decay_on_device);
void flag_nonfinite(const std::vector<FiniteSlot>& slots, int device, float* flag);

// --- matmul.cpp. Requires: a and b contiguous 2-D f32; op(a) [M, K] and op(b) [K, N],
// op(t) = t or its transpose (strides, never a copy); bias [N] or undefined; out contiguous
// [M, N]. Ensures: out = op(a) op(b) (+ bias per row) (then max(0, .) when relu).
void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& bias,
            bool relu, const Tensor& out);

// --- conv.cpp. Activations NCHW-contiguous or channels-last, each tensor's layout read from
// its strides; weights plain OIHW; a channels-last output makes the kernels work in nhwc.
// Requires: f32; x [N, C, H, W], w [OC, C/groups, KH, KW], bias [OC] or undefined,
// out [N, OC, OH, OW] with OH = (H + 2p - d(KH-1) - 1)/s + 1.
// Ensures: out = conv(x, w) + bias, then max(0, .) when relu; every element written.
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p, bool relu,
                    const Tensor& out);
// Requires: as conv2d_forward; grad_out already masked by a fused ReLU; x and grad_x in one
// layout; x defined when grad_w or grad_bias is, w when grad_x is.
// Ensures: each defined gradient overwritten; an undefined one is not computed.
void conv2d_backward(const Shape& x_shape, const Shape& w_shape, const Tensor& x, const Tensor& w,
                     const Tensor& grad_out, const ConvParams& p, const Tensor& grad_x, const Tensor& grad_w,
                     const Tensor& grad_bias);
// The table's entry: x kept in its layout, w made plain OIHW, the output channels-last
// unless DPT_CHANNELS_LAST=0.
ConvForward conv2d_forward_run(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p,
                               bool relu, const Shape& out_shape);

// --- pool.cpp: x, out and gradients NCHW or channels-last, one layout.
// Bytes of the workspace a training forward leaves for pool2d_backward (max pooling's
// argmax; 0 for average pooling).
size_t pool2d_workspace_bytes(PoolKind kind, const Shape& x_shape, const Shape& out_shape,
                              const PoolParams& p, bool channels_last = false);
// Requires: x [N, C, H, W] f32, out [N, C, OH, OW] with OH = (H + 2 padding - kernel) / stride + 1;
// workspace undefined (inference) or of at least pool2d_workspace_bytes (any dtype).
// Ensures: out written entirely; a defined workspace filled for pool2d_backward.
void pool2d_forward(PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out,
                    const Tensor& workspace);
// Requires: for max, the workspace its forward filled. Ensures: grad_x overwritten with dL/dx.
void pool2d_backward(PoolKind kind, const Shape& x_shape, const Tensor& grad_out, const PoolParams& p,
                     const Tensor& workspace, const Tensor& grad_x);
void pool2d_forward_run(PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out,
                        bool keep_for_backward, PoolSaved& saved);
void pool2d_backward_run(PoolKind kind, const PoolSaved& saved, const Tensor& grad_out, const PoolParams& p,
                         const Tensor& grad_x);

// --- batchnorm.cpp: over N, H, W per channel, optionally with a ReLU fused after it.
struct BatchNormKernelParams {
  float eps = 1e-5f;
  bool use_global_stats = false;  // normalise with given mean/var (eval) instead of batch stats
  bool relu = false;              // out = max(0, bn(x))
};
// Bytes of the workspace a forward must leave for batch_norm_backward (the ReLU mask; 0
// without relu).
size_t batch_norm_workspace_bytes(const Shape& x_shape, const BatchNormKernelParams& p,
                                  bool channels_last = false);
// Requires: f32 x [N, C, H, W] NCHW or channels-last, out in x's layout; weight, bias, mean,
// var contiguous [C]; workspace undefined (no backward follows) or of batch_norm_workspace_bytes.
// Ensures: out = weight (x - mean) / sqrt(var + eps) + bias (then ReLU). Without
// use_global_stats, mean and var are outputs (batch mean, biased variance); with it, inputs.
void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                        const Tensor& var, const BatchNormKernelParams& p, const Tensor& out,
                        const Tensor& workspace);
// Requires: what the forward used and left; grad_out and grad_x in x's layout.
// Ensures: all three gradients overwritten.
void batch_norm_backward(const Tensor& x, const Tensor& grad_out, const Tensor& weight, const Tensor& bias,
                         const Tensor& mean, const Tensor& var, const BatchNormKernelParams& p,
                         const Tensor& workspace, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias);
Tensor batch_norm_forward_run(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& running_mean, const Tensor& running_var, bool keep_for_backward,
                              BatchNormSaved& saved);
void batch_norm_backward_run(const BatchNormSaved& saved, const Tensor& grad_out, const Tensor& grad_x,
                             const Tensor& grad_weight, const Tensor& grad_bias);

}  // namespace dpt::cpu
