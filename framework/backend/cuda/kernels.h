// CUDA's kernels, the twins of backend/cpu/kernels.h, that kernels.cpp puts in the table:
// one .cu (or, for the cuDNN/cuBLAS wrappers, .cpp) per family. Unless an entry says
// otherwise: the tensors of one call are on one CUDA device, all f32 or all bf16 (computed
// in f32); 4-D activations are contiguous NCHW or channels-last NHWC (layout.h); work is
// queued on the device's compute stream, and nothing waits for the GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/kernels.h"
#include "core/tensor.h"

namespace dpt::cuda {

// --- elementwise.cu
// Requires: a, b broadcastable, any strides, at most 8 dimensions; out contiguous with the
// broadcast shape, or, when a and b have the same shape and the same dense strides, out
// with those strides too. Ensures: out = a op b, every element written.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// Requires: out contiguous, a of out's shape (any strides). Ensures: out = a * scale + shift.
void affine(const Tensor& a, float scale, float shift, const Tensor& out);
// Requires: dst and src dense with the same shape and strides. Ensures: dst += src.
void add_inplace(const Tensor& dst, const Tensor& src);
// Requires: `shape` broadcasts to t's shape. Ensures: a new contiguous tensor of `shape`,
// t summed over the broadcast dimensions (in double); t itself when the shapes are equal.
Tensor sum_to_shape(const Tensor& t, const Shape& shape);
// t itself when contiguous, else a contiguous copy (any strides, at most 8 dimensions,
// any dtype). The CUDA twin of Tensor::contiguous(), which copies on the CPU only.
Tensor contiguous(const Tensor& t);

// --- cast.cu: the kernel behind ops/cast.h (f32 <-> bf16, NCHW <-> NHWC) in one pass.
// Requires: src and dst of one shape (at most 8 dimensions), each f32 or bf16; src any
// strides, dst dense. Ensures: every element of dst = src's, converted (to bf16: rounded to
// nearest, ties to even). One flat pass when both share dense strides.
void cast_copy(const Tensor& src, const Tensor& dst);

// --- reduce.cu: whole-tensor sums (ops/reduce.h) and the broadcast that is their backward.
// Requires: x f32 (any strides), out one f32 element. Ensures: out = scale * sum(x),
// accumulated in double in a fixed order (deterministic).
void sum_scaled(const Tensor& x, double scale, const Tensor& out);
// Requires: scalar one f32 element, out dense f32. Ensures: every element of out = scalar *
// scale (the product rounded to f32 once, as the CPU's Tensor::full(shape, g.item() * scale)).
void fill_scaled(const Tensor& out, const Tensor& scalar, float scale);

// --- activation.cu. The backward reads the forward output (out > 0 is the mask), which
// also serves add_relu and the ReLU fused into conv, linear and BN.
// Requires: x and out dense with the same shape and strides, size-1 dimensions aside
// (layout.h same_dense_layout); out may be x. Ensures: out = max(x, 0).
void relu_forward(const Tensor& x, const Tensor& out);
// Requires: a, b and out alike, as above; out may be a or b. Ensures: out = max(a + b, 0),
// summed in f32 and rounded once; a NaN sum gives 0, as relu_forward does.
void add_relu_forward(const Tensor& a, const Tensor& b, const Tensor& out);
// Requires: out, grad_out and grad_in alike, as above; grad_in may be grad_out.
// Ensures: grad_in = out > 0 ? grad_out : 0.
void relu_backward(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in);
// The same into a new tensor: the backward of a ReLU fused into conv, linear or BN.
Tensor relu_backward(const Tensor& out, const Tensor& grad_out);

// --- dropout.cu. A GPU cannot draw serially as the CPU does: each element's bits come from
// a counter-based hash of (seed, index), the seed drawn once per call from the caller's Rng,
// so runs repeat from the seed but CPU and CUDA masks differ.
// Requires: x, mask, out f32 contiguous of one shape; 0 <= p < 1.
// Ensures: mask[i] = 0 with probability p, else 1 / (1 - p) (decided as the CPU does: 32
// random bits below p 2^32 drop); out = x * mask.
void dropout_forward(const Tensor& x, float p, uint64_t seed, const Tensor& mask, const Tensor& out);

// --- matmul.cu: cuBLAS; transposes are flags, never copies; TF32 per math_settings.h.
// Requires: a and b contiguous 2-D, both f32 or both bf16 (tensor cores, f32 accumulation);
// op(a) [M, K] and op(b) [K, N], op(t) = t or its transpose; bias f32 [N] or undefined; out
// contiguous [M, N] of a's dtype. Ensures: out = op(a) op(b) (+ bias per row) (then
// max(0, .) when relu), every element written (K = 0 gives zeros, plus bias).
void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& bias,
            bool relu, const Tensor& out);
// Requires: t contiguous 2-D [M, N] f32 or bf16, out contiguous f32 [N].
// Ensures: out[j] = sum_i t[i, j] (in double).
void sum_rows(const Tensor& t, const Tensor& out);

// --- channel.cu: per-channel bias for the convolutions cuDNN's bias call does not cover
// here (bf16 or channels-last); the bias and its gradient stay f32.
// Requires: out [N, C, H, W]; bias f32 [C]. Ensures: out += bias[c], then max(0, .) when relu.
void channel_bias_add(const Tensor& out, const Tensor& bias, bool relu);
// Requires: t like `out` above; sum f32 [C]. Ensures: sum[c] = sum of t[:, c] (in double).
void channel_sum(const Tensor& t, const Tensor& sum);

// --- conv.cpp: cuDNN, f32 or bf16 (tensor cores, f32 accumulation); NCHW activations with
// OIHW weights, or (ConvParams::nhwc) NHWC activations with OHWI weights. Algorithms are
// chosen once per shape, dtype and layout (cuDNN's heuristics) and cached.
// Requires: x [N, C, H, W], w [OC, C/groups, KH, KW], grad_out [N, OC, OH, OW]
// (OH = (H + 2p - d(KH-1) - 1)/s + 1) of one dtype in p.nhwc's layout, the gradients in the same dtype and
// layout (grad_bias f32); grad_out already masked by a fused ReLU; x defined when grad_w or grad_bias is, w
// when grad_x is. Ensures: each defined output overwritten; an undefined one is not computed.
void conv2d_backward(const Shape& x_shape, const Shape& w_shape, const Tensor& x, const Tensor& w,
                     const Tensor& grad_out, const ConvParams& p, const Tensor& grad_x, const Tensor& grad_w,
                     const Tensor& grad_bias);
// The table's entry: NHWC when p.nhwc asks for it or the input already is, x and w brought
// to that layout, then conv2d_forward.
ConvForward conv2d_forward_run(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p,
                               bool relu, const Shape& out_shape);

// --- batchnorm.cu: over N, H, W per channel, each with an optional ReLU after it; the [C]
// tensors contiguous f32. f32 NCHW runs on cuDNN (spatial batch norm for training and
// inference forward; a plain kernel for the backward of eval mode, as cuDNN's assumes batch
// statistics), with the ReLU as separate relu_forward / relu_backward passes; bf16 and NHWC
// on the kernels of batchnorm_kernels.cu (bn_kernels below, with batchnorm.cu's contracts),
// which fuse it.
// The table's entries: training or inference by saved.params, the statistics (and a fused
// ReLU's output, its mask) kept in `saved`.
Tensor batch_norm_forward_run(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& running_mean, const Tensor& running_var, bool keep_for_backward,
                              BatchNormSaved& saved);
void batch_norm_backward_run(const BatchNormSaved& saved, const Tensor& grad_out, const Tensor& grad_x,
                             const Tensor& grad_weight, const Tensor& grad_bias);

namespace bn_kernels {  // batchnorm_kernels.cu: bf16 and/or NHWC, called from batchnorm.cu only
void forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, float momentum, float eps, bool relu, const Tensor& out,
                      const Tensor& save_mean, const Tensor& save_invstd);
void forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                       const Tensor& var, float eps, bool relu, const Tensor& out);
void backward_training(const Tensor& x, const Tensor& grad_out, const Tensor& relu_out, const Tensor& weight,
                       const Tensor& save_mean, const Tensor& save_invstd, const Tensor& grad_x,
                       const Tensor& grad_weight, const Tensor& grad_bias);
void backward_inference(const Tensor& x, const Tensor& grad_out, const Tensor& relu_out, const Tensor& weight,
                        const Tensor& mean, const Tensor& var, float eps, const Tensor& grad_x,
                        const Tensor& grad_weight, const Tensor& grad_bias);
}  // namespace bn_kernels

// --- sync_batchnorm.cu, the twin of cpu/sync_batchnorm.cpp: the per-channel sums that go
// across ranks (ops/sync_batch_norm.cpp) and the elementwise passes between them. Sums run in double in a fixed order (partial
// sums per block, then per channel in index order; no atomics) and are handed over as f32,
// as the CPU's are. x, gradients, xhat and outputs contiguous NCHW f32; the rest contiguous f32.
// stats [C + 1]: stats[ch] = sum over N, H, W of x[., ch, ., .]; stats[C] = N H W.
void sync_bn_sum(const Tensor& x, const Tensor& stats);
// Requires `stats` as sync_bn_sum left it, summed over ranks (count = stats[C]).
// Ensures: sq [C] = sum over N, H, W of (x - mean)^2 with mean = stats[ch] / count in double.
void sync_bn_sum_sq_dev(const Tensor& x, const Tensor& stats, const Tensor& sq);
// Requires stats and sq summed over ranks, count > 1. Ensures: saved [2C] = (mean as f32,
// invstd = 1 / sqrt(var + eps)) with var = sq / count; running_mean and running_var (if
// defined) = (1 - momentum) running + momentum (mean, var count / (count - 1)).
void sync_bn_finish_stats(const Tensor& stats, const Tensor& sq, float eps, float momentum,
                          const Tensor& running_mean, const Tensor& running_var, const Tensor& saved);
// xhat = (x - mean) invstd; out = xhat weight + bias (saved from sync_bn_finish_stats).
void sync_bn_normalize(const Tensor& x, const Tensor& saved, const Tensor& weight, const Tensor& bias,
                       const Tensor& xhat, const Tensor& out);
// sums [2C] = (sum of g, sum of g xhat) per channel; grad_bias and grad_weight [C] get the
// same two local sums (the parameter gradients are this rank's share).
void sync_bn_grad_sums(const Tensor& grad_out, const Tensor& xhat, const Tensor& sums,
                       const Tensor& grad_bias, const Tensor& grad_weight);
// Requires `sums` summed over ranks, `stats` the forward's (for the count). Ensures:
// grad_x = weight invstd (g - sum_g / count - xhat sum_g_xhat / count).
void sync_bn_grad_input(const Tensor& grad_out, const Tensor& xhat, const Tensor& weight, const Tensor& saved,
                        const Tensor& stats, const Tensor& sums, const Tensor& grad_x);

// --- pool.cu: f32 NCHW pooling on cuDNN (max in its deterministic mode), the rest on own
// kernels; one dtype and layout per call (global pooling's [N, C] side contiguous).
// Requires: x [N, C, H, W] with H W >= 1, out [N, C]. Ensures: out = mean over H, W (sum in double).
void global_avg_pool2d_forward(const Tensor& x, const Tensor& out);
// Requires: grad_out [N, C], grad_x [N, C, H, W]. Ensures: grad_x = grad_out / (H W).
void global_avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x);
// The table's entries: the input and output kept in `saved`.
void pool2d_forward_run(PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out,
                        bool keep_for_backward, PoolSaved& saved);
void pool2d_backward_run(PoolKind kind, const PoolSaved& saved, const Tensor& grad_out, const PoolParams& p,
                         const Tensor& grad_x);

// --- shortcut_pad.cu: ResNet's option-A shortcut; both tensors of a call share dtype and layout.
// Requires: x [N, C, H, W], out [N, OC, ceil(H/s), ceil(W/s)] with OC >= C.
// Ensures: out[:, c < C] = x[:, c, ::s, ::s], out[:, c >= C] = 0.
void shortcut_pad_forward(const Tensor& x, int64_t stride, const Tensor& out);
// Requires: grad_out like out above, grad_x like x. Ensures: grad_x at the sampled
// positions = grad_out[:, c < C], 0 elsewhere; every element written.
void shortcut_pad_backward(const Tensor& grad_out, int64_t stride, const Tensor& grad_x);

// --- loss.cu: row-wise softmax losses on contiguous f32 [rows, cols] logits, i64 labels
// [rows], one warp per row, sums in double. Losses land in a one-element device tensor;
// backward kernels read the upstream gradient from one too.
// Waits for the GPU. Returns the first row whose label is outside [0, classes), or -1;
// *label gets that label.
int64_t first_bad_label(const Tensor& labels, int64_t classes, int64_t* label);
// out[r, c] = x[r, c] - log(sum_c exp(x[r, c])).
void log_softmax_forward(const Tensor& x, const Tensor& out);
// grad_in = grad_out - exp(out) * rowsum(grad_out); grad_in may be grad_out.
void log_softmax_backward(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in);
// loss = mean over rows of -log_probs[r, labels[r]].
void nll_forward(const Tensor& log_probs, const Tensor& labels, const Tensor& loss);
// grad_in[r, c] = (c == labels[r]) ? -grad_loss / rows : 0, every element written.
void nll_backward(const Tensor& labels, const Tensor& grad_loss, const Tensor& grad_in);
// log_probs = log_softmax(logits); loss = mean over rows of
// -(1-s) log_probs[r, label] - (s/C) sum_c log_probs[r, c].
void cross_entropy_forward(const Tensor& logits, const Tensor& labels, float smoothing,
                           const Tensor& log_probs, const Tensor& loss);
// grad = (grad_loss / rows) * (exp(log_probs) - ((1-s) onehot(label) + s/C)).
void cross_entropy_backward(const Tensor& log_probs, const Tensor& labels, float smoothing,
                            const Tensor& grad_loss, const Tensor& grad);
// Waits for the GPU. Rows whose largest logit (the first, on ties) is at the label.
int64_t count_correct(const Tensor& logits, const Tensor& labels);

// --- eval_totals.cu: evaluation totals kept on the device, so an evaluation pass reads
// nothing back until its end (and all-reduces the three numbers on the device first).
// Requires: totals contiguous f32 [3]; loss f32 [1] (a batch mean); logits f32 or bf16
// [rows, C] (any strides); labels contiguous i64 [rows] in [0, C); the rows of every call so
// far below 2^24 (counts stay exact in f32).
// Ensures: totals += (loss rows, rows whose largest logit — the first on ties — is at the
// label, rows).
void eval_totals_add(const Tensor& totals, const Tensor& loss, const Tensor& logits, const Tensor& labels);

// --- optim.cu: fused updates, one launch for many parameters (up to kMaxTensors at a time),
// with exactly the per-element rules of the CPU's loops (cpu/optim.cpp). A non-null
// *_on_device pointer (CUDA graphs) is read as the kernel runs instead of the by-value
// scalars, so a captured update follows the schedule.
// PyTorch's SGD: g = grad + wd w; v = momentum v + g; w -= lr (nesterov ? g + momentum v : v);
// without momentum w -= lr g.
void sgd_update(const std::vector<SgdSlot>& slots, int device, float lr, float weight_decay, float momentum,
                bool nesterov, const float* lr_on_device = nullptr);
// AdamW: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w = w decay - lr (m / c1) / (sqrt(v / c2)
// + eps), the caller computing decay = 1 - lr wd, c1 = 1 - b1^t, c2 = 1 - b2^t.
void adamw_update(const std::vector<AdamWSlot>& slots, int device, float lr, float decay, float beta1,
                  float beta2, float eps, float c1, float c2, const float* scalars_on_device = nullptr);
// The non-finite gradient check of a graphed step, which must not read gradients back.
void flag_nonfinite(const std::vector<FiniteSlot>& slots, int device, float* flag);
// Requires: average and current contiguous f32 of one shape.
// Ensures: average = decay average + (1 - decay) current (optim/ema.cpp's rule).
void ema_update(const Tensor& average, const Tensor& current, float decay,
                const float* decay_on_device = nullptr);

}  // namespace dpt::cuda
