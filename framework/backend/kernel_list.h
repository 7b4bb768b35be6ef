// The kernels every device defines, each once: DPT_KERNEL(return type, name, (parameters)),
// with DPT_KERNEL defined as a Kernels entry (kernels.h), a declaration in namespace cpu or
// cuda (backend/*/kernels.h), or a table initializer (backend/*/kernels.cpp); no include
// guard. kernels.h's conventions hold. The CPU's kernels take f32; CUDA's f32 or bf16
// (computed in f32) unless a line says otherwise, queued on the device's compute stream
// without waiting for it. A new kernel: a line here, a definition per device.

// --- elementwise (ops/elementwise.h): a, b and out dense; b broadcast to out's shape (on
// CUDA: at most 8 dimensions; out contiguous, or with a's strides when a and b share them).
DPT_KERNEL(void, binary, (BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out))
// out = a scale + shift; out contiguous, a of out's shape (any strides).
DPT_KERNEL(void, affine, (const Tensor& a, float scale, float shift, const Tensor& out))
// dst += src, both dense of one shape and layout.
DPT_KERNEL(void, add_inplace, (const Tensor& dst, const Tensor& src))
// The broadcast's backward: t summed (in double) over the dimensions `shape` broadcasts to,
// a new contiguous tensor; t itself when the shapes are equal.
DPT_KERNEL(Tensor, sum_to_shape, (const Tensor& t, const Shape& shape))
// out (one f32 element) = scale * sum(x), x f32 with any strides; in double, in a fixed
// order, so the bits do not depend on the thread count or on which blocks finish first.
DPT_KERNEL(void, sum_scaled, (const Tensor& x, double scale, const Tensor& out))
// Every element of out (dense f32) = scalar (one f32 element) * scale, rounded once.
DPT_KERNEL(void, fill_scaled, (const Tensor& out, const Tensor& scalar, float scale))

// --- activations: x, out and gradients dense with one shape and layout (size-1 dimensions
// aside, cuda/layout.h same_dense_layout); an output may alias an input. The backward reads
// the forward's output (out > 0 is the mask), which also serves add_relu and every fused ReLU.
DPT_KERNEL(void, relu_forward, (const Tensor& x, const Tensor& out))
// out = max(a + b, 0), summed in f32 and rounded once; a NaN sum gives 0, as relu_forward does.
DPT_KERNEL(void, add_relu_forward, (const Tensor& a, const Tensor& b, const Tensor& out))
// grad_in = out > 0 ? grad_out : 0.
DPT_KERNEL(void, relu_backward, (const Tensor& out, const Tensor& grad_out, const Tensor& grad_in))
// x, mask, out contiguous f32 of one shape, 0 <= p < 1: mask[i] = 0 when 32 random bits fall
// below p 2^32, else 1 / (1 - p); out = x mask. Runs repeat from rng's state whatever the
// thread count: the CPU draws serially, CUDA hashes (one draw of rng, index), so the two
// devices' masks differ.
DPT_KERNEL(void, dropout_forward, (const Tensor& x, float p, Rng& rng, const Tensor& mask, const Tensor& out))

// --- matrix products: a and b contiguous 2-D; op(a) [M, K] and op(b) [K, N], op(t) = t or
// its transpose (strides or flags, never a copy); bias f32 [N] or undefined; out contiguous
// [M, N]. out = op(a) op(b) (+ bias per row), then max(0, .) when relu (CUDA: K = 0 gives
// zeros plus bias).
DPT_KERNEL(void, matmul, (const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                          const Tensor& bias, bool relu, const Tensor& out))
// out[j] = sum_i t[i, j] (CUDA: in double); t contiguous [M, N], out contiguous f32 [N].
DPT_KERNEL(void, sum_rows, (const Tensor& t, const Tensor& out))

// --- convolution. x comes contiguous or channels-last; the forward chooses the layouts it
// runs in and returns them (the CPU keeps x's and makes the output channels-last unless
// DPT_CHANNELS_LAST=0; CUDA runs NHWC with OHWI weights when params.nhwc asks or x is
// channels-last, else NCHW). out_shape [N, OC, OH, OW], OH = (H + 2p - d(KH-1) - 1)/s + 1.
DPT_KERNEL(ConvForward, conv2d_forward, (const Tensor& x, const Tensor& w, const Tensor& bias,
                                         const ConvParams& p, bool relu, const Shape& out_shape))
// x and w as the forward returned them; gradients allocated by the caller in their layouts
// (grad_bias f32) and overwritten; an undefined one is not computed. grad_out is already
// masked by a fused ReLU. x is needed for grad_w or grad_bias, w for grad_x.
DPT_KERNEL(void, conv2d_backward, (const Shape& x_shape, const Shape& w_shape, const Tensor& x,
                                   const Tensor& w, const Tensor& grad_out, const ConvParams& p,
                                   const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_bias))

// --- batch norm over N, H, W per channel, by saved.params (training or inference, a fused
// ReLU); x contiguous or channels-last, the [C] tensors contiguous f32; out (returned) in x's
// layout. Training updates running_mean/var when defined (with the unbiased variance).
DPT_KERNEL(Tensor, batch_norm_forward, (const Tensor& x, const Tensor& weight, const Tensor& bias,
                                        const Tensor& running_mean, const Tensor& running_var,
                                        bool keep_for_backward, BatchNormSaved& saved))
// grad_out in saved.x's layout; all three gradients written.
DPT_KERNEL(void, batch_norm_backward, (const BatchNormSaved& saved, const Tensor& grad_out,
                                       const Tensor& grad_x, const Tensor& grad_weight,
                                       const Tensor& grad_bias))

// --- synchronised batch norm's passes: the per-channel sums that go across ranks (in
// ops/sync_batch_norm.cpp, between these calls) and the elementwise passes. x, gradients,
// xhat and outputs contiguous NCHW f32, the rest contiguous f32. Sums run in double in a
// fixed order and are handed over as f32.
// stats [C + 1]: stats[ch] = sum over N, H, W of x[., ch, ., .]; stats[C] = N H W.
DPT_KERNEL(void, sync_bn_sum, (const Tensor& x, const Tensor& stats))
// stats as sync_bn_sum left it, summed over ranks: sq [C] = sum of (x - mean)^2, mean =
// stats[ch] / stats[C] in double.
DPT_KERNEL(void, sync_bn_sum_sq_dev, (const Tensor& x, const Tensor& stats, const Tensor& sq))
// stats and sq summed over ranks, count > 1: saved [2C] = (mean, invstd = 1 / sqrt(var +
// eps)) with var = sq / count; running_mean and running_var (if defined) = (1 - momentum)
// running + momentum (mean, var count / (count - 1)).
DPT_KERNEL(void, sync_bn_finish_stats, (const Tensor& stats, const Tensor& sq, float eps, float momentum,
                                        const Tensor& running_mean, const Tensor& running_var,
                                        const Tensor& saved))
// xhat = (x - mean) invstd; out = xhat weight + bias.
DPT_KERNEL(void, sync_bn_normalize, (const Tensor& x, const Tensor& saved, const Tensor& weight,
                                     const Tensor& bias, const Tensor& xhat, const Tensor& out))
// sums [2C] = (sum of g, sum of g xhat) per channel; grad_bias and grad_weight [C] get the
// same two local sums (the parameter gradients are this rank's share).
DPT_KERNEL(void, sync_bn_grad_sums, (const Tensor& grad_out, const Tensor& xhat, const Tensor& sums,
                                     const Tensor& grad_bias, const Tensor& grad_weight))
// sums summed over ranks, stats the forward's (for the count):
// grad_x = weight invstd (g - sum_g / count - xhat sum_g_xhat / count).
DPT_KERNEL(void, sync_bn_grad_input, (const Tensor& grad_out, const Tensor& xhat, const Tensor& weight,
                                      const Tensor& saved, const Tensor& stats, const Tensor& sums,
                                      const Tensor& grad_x))

// --- pooling: x and out [N, C, H, W] and [N, C, OH, OW], OH = (H + 2 padding - kernel) /
// stride + 1, contiguous or channels-last, one layout and dtype.
DPT_KERNEL(void, pool2d_forward, (PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out,
                                  bool keep_for_backward, PoolSaved& saved))
// grad_x overwritten; on max-pooling ties the gradient goes to one of the maxima.
DPT_KERNEL(void, pool2d_backward, (PoolKind kind, const PoolSaved& saved, const Tensor& grad_out,
                                   const PoolParams& p, const Tensor& grad_x))
// out [N, C] contiguous = mean over H, W.
DPT_KERNEL(void, global_avg_pool2d_forward, (const Tensor& x, const Tensor& out))
// grad_x = grad_out / (H W); grad_out [N, C] contiguous.
DPT_KERNEL(void, global_avg_pool2d_backward, (const Tensor& grad_out, const Tensor& grad_x))
// ResNet's option-A shortcut: out[:, :C] = x[:, :, ::stride, ::stride], the other channels 0;
// out [N, OC, ceil(H/s), ceil(W/s)] with OC >= C, in x's dtype and layout.
DPT_KERNEL(void, shortcut_pad_forward, (const Tensor& x, int64_t stride, const Tensor& out))
// grad_x = grad_out[:, :C] at the sampled positions, 0 elsewhere; every element written.
DPT_KERNEL(void, shortcut_pad_backward, (const Tensor& grad_out, int64_t stride, const Tensor& grad_x))

// --- losses: contiguous [rows, cols] f32, labels contiguous i64 [rows], losses [] f32; sums
// in double. The two that return a count wait for the device.
// First row whose label is outside [0, classes), its label in *label; -1 when none.
DPT_KERNEL(int64_t, first_bad_label, (const Tensor& labels, int64_t classes, int64_t* label))
// out[r, c] = x[r, c] - log(sum_c exp(x[r, c])).
DPT_KERNEL(void, log_softmax_forward, (const Tensor& x, const Tensor& out))
// grad_in = grad_out - exp(out) rowsum(grad_out); grad_in may be grad_out.
DPT_KERNEL(void, log_softmax_backward, (const Tensor& out, const Tensor& grad_out, const Tensor& grad_in))
// loss = mean over rows of -log_probs[r, labels[r]].
DPT_KERNEL(void, nll_forward, (const Tensor& log_probs, const Tensor& labels, const Tensor& loss))
// grad_in[r, c] = c == labels[r] ? -grad_loss / rows : 0.
DPT_KERNEL(void, nll_backward, (const Tensor& labels, const Tensor& grad_loss, const Tensor& grad_in))
// log_probs = log_softmax(logits); loss = mean over rows of
// -(1-s) log_probs[r, label] - (s/C) sum_c log_probs[r, c].
DPT_KERNEL(void, cross_entropy_forward, (const Tensor& logits, const Tensor& labels, float smoothing,
                                         const Tensor& log_probs, const Tensor& loss))
// grad = (grad_loss / rows) (exp(log_probs) - ((1-s) onehot(label) + s/C)).
DPT_KERNEL(void, cross_entropy_backward, (const Tensor& log_probs, const Tensor& labels, float smoothing,
                                          const Tensor& grad_loss, const Tensor& grad))
// Rows whose largest logit (the first, on ties) is at the label.
DPT_KERNEL(int64_t, count_correct, (const Tensor& logits, const Tensor& labels))
// totals [3] += (loss rows, correct rows, rows) (train/parallel_plan.cpp's evaluate), kept on
// the device so an evaluation reads nothing back until its end. loss f32 [1] (a batch mean);
// logits any strides; labels in [0, C); the rows of every call so far below 2^24 (counts
// stay exact in f32).
DPT_KERNEL(void, eval_totals_add, (const Tensor& totals, const Tensor& loss, const Tensor& logits,
                                   const Tensor& labels))

// --- optimizers (optim/): one fused update over the slots of one device, per element the
// same rule on both. A non-null *_on_device pointer (CUDA graphs; host memory on the CPU) is
// read as the kernel runs instead of the value, so a captured update follows the schedule.
// PyTorch's SGD: g = grad + wd w; v = momentum v + g; w -= lr (nesterov ? g + momentum v : v);
// without momentum w -= lr g.
DPT_KERNEL(void, sgd_update, (const std::vector<SgdSlot>& slots, int device, float lr, float weight_decay,
                              float momentum, bool nesterov, const float* lr_on_device))
// AdamW: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w = w decay - lr (m / c1) / (sqrt(v / c2)
// + eps), the caller computing decay = 1 - lr wd, c1 = 1 - b1^t, c2 = 1 - b2^t.
// scalars_on_device: lr, decay, c1, c2.
DPT_KERNEL(void, adamw_update, (const std::vector<AdamWSlot>& slots, int device, float lr, float decay,
                                float beta1, float beta2, float eps, float c1, float c2,
                                const float* scalars_on_device))
// average = decay average + (1 - decay) current; both contiguous f32 of one shape.
DPT_KERNEL(void, ema_update, (const Tensor& average, const Tensor& current, float decay,
                              const float* decay_on_device))
// *flag (one f32 on the device) = 1 when an element is Inf or NaN; left as it was otherwise
// (a graphed step's check, which must not read gradients back).
DPT_KERNEL(void, flag_nonfinite, (const std::vector<FiniteSlot>& slots, int device, float* flag))

#undef DPT_KERNEL
