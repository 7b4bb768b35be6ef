// The kernels a device offers: one table per device type, filled by backend/cpu/kernels.cpp
// and backend/cuda/kernels.cpp, chosen by a tensor's device (kernels_for). Ops, autograd,
// optimizers and the trainer state each rule once and call through this table, so the
// CPU-only and the CUDA build compile the same code above backend/, and the CPU suite runs
// every rule that is not a kernel launch.
//
// Conventions for every entry: tensors are on the table's device; outputs are allocated by
// the caller (unless an entry returns a tensor) and every element of them is written;
// `device` arguments are device indices of the table's type. An entry a device lacks is
// null (the caller turns that into an error naming the device).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"

namespace dpt {

enum class BinaryOp { add, sub, mul, div };

enum class PoolKind {
  max,  // padding never wins (it counts as -inf)
  avg,  // divides by kernel*kernel, padding included (PyTorch's count_include_pad=true)
};

struct PoolParams {
  int64_t kernel = 2;
  int64_t stride = 2;
  int64_t padding = 0;
};

struct ConvParams {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;  // PyTorch convention: 1 means no dilation
  int64_t groups = 1;
  // Activations and their gradients channels-last (NHWC). Given to conv2d_forward: the
  // caller asks for it (Conv2dOptions::channels_last); returned: what the kernels run in.
  bool nhwc = false;
};

// A convolution's forward as it ran: the output, and x and w in the layouts the kernels
// read them (what conv2d_backward is given back).
struct ConvForward {
  Tensor out, x, w;
  ConvParams params;
};

struct BatchNormParams {
  float eps = 1e-5f;
  float momentum = 0.1f;  // running = (1 - momentum) running + momentum batch
  bool training = true;   // batch statistics (and a running update); else the given ones
  bool relu = false;      // out = max(0, bn(x))
};

// What a batch norm forward keeps for its backward; the backend's forward fills what its
// backward reads. mean/stat: training, the batch mean and the backend's second statistic;
// eval, snapshots of the running mean and variance (the caller sets those).
struct BatchNormSaved {
  Tensor x, weight, bias, mean, stat, out, workspace;
  BatchNormParams params;
};

// What a pooling forward keeps for its backward (the backend's choice: the input and the
// output, or an argmax workspace).
struct PoolSaved {
  Tensor x, out, workspace;
};

// One parameter of a fused optimizer update: n contiguous f32 elements each.
struct SgdSlot {
  float* weight;
  const float* grad;
  float* velocity;  // unused when momentum == 0
  int64_t n;
};

struct AdamWSlot {
  float* weight;
  const float* grad;
  float* m;
  float* v;
  int64_t n;
};

struct FiniteSlot {
  const float* x;
  int64_t n;
};

// Host bytes copied to a device without stalling the host, ordered before the work queued
// after the copy (backend/cuda/upload.h).
class Upload {
 public:
  virtual ~Upload() = default;
  // Requires bytes <= the capacity it was made with; dst in the device's memory.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
};

// A step run eagerly `warmup` times, then captured once and replayed (backend/cuda/graph.h).
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  virtual void run() = 0;
  virtual bool graphed() const = 0;
  virtual size_t node_count() const = 0;  // what a replay launches; 0 before the capture
};

// The data loader's batches copied to a device while the step before still runs
// (backend/cuda/batch_upload.h).
class BatchUploader {
 public:
  virtual ~BatchUploader() = default;
  virtual void start(const std::vector<Tensor>& host) = 0;  // requires nothing pending
  virtual bool pending() const = 0;
  virtual std::vector<Tensor> take() = 0;  // the started tensors, on the device
  virtual void drop() = 0;                 // forgets a pending batch
};

struct Kernels {
  const char* name;  // "CPU", "CUDA": for messages
  bool bf16;         // takes bf16 activations and weights (mixed precision, nn/compute.h)

  // --- the device itself
  // A CUDA graph capture is recording on `device`: nothing may read back or copy from the host.
  bool (*capturing)(int device);
  // dst = src of one shape, any strides on either side, converting f32 <-> bf16.
  void (*copy)(const Tensor& src, const Tensor& dst);
  // Staging for uploads of up to `capacity` bytes to `device`.
  std::unique_ptr<Upload> (*upload_make)(size_t capacity, int device);
  // null where batches need no staging (the CPU: the loader's tensors are used as they are).
  std::unique_ptr<BatchUploader> (*batch_uploader_make)(int device);
  // null where there are no graphs (the CPU).
  std::unique_ptr<StepGraph> (*step_graph_make)(int device, int warmup, std::function<void()> step);

  // --- elementwise (ops/elementwise.h): a, b and out dense; b broadcast to out's shape.
  void (*binary)(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
  void (*affine)(const Tensor& a, float scale, float shift, const Tensor& out);  // out = a scale + shift
  void (*add_inplace)(const Tensor& dst, const Tensor& src);    // dst += src, one dense layout
  Tensor (*sum_to_shape)(const Tensor& t, const Shape& shape);  // the broadcast's backward
  // Whole-tensor sum times scale into the one-element out; out = scalar * scale everywhere.
  void (*sum_scaled)(const Tensor& x, double scale, const Tensor& out);
  void (*fill_scaled)(const Tensor& out, const Tensor& scalar, float scale);

  // --- activations: x, out and gradients of one dense layout
  void (*relu_forward)(const Tensor& x, const Tensor& out);
  void (*add_relu_forward)(const Tensor& a, const Tensor& b, const Tensor& out);
  void (*relu_backward)(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in);  // g where out > 0
  void (*dropout_forward)(const Tensor& x, float p, Rng& rng, const Tensor& mask, const Tensor& out);

  // --- matrix products (backend/*/kernels.h): out = op(a) op(b) + bias, then ReLU
  void (*matmul)(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& bias,
                 bool relu, const Tensor& out);
  void (*sum_rows)(const Tensor& t, const Tensor& out);

  // --- convolution (backend/*/kernels.h). x comes contiguous or channels-last; the forward
  // chooses the layouts it runs in (the CPU keeps x's and makes the output channels-last
  // unless DPT_CHANNELS_LAST=0; CUDA's follow the input or params.nhwc).
  ConvForward (*conv2d_forward)(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p,
                                bool relu, const Shape& out_shape);
  // Gradients allocated by the caller in the layouts of the forward's x and w (undefined:
  // not computed); grad_out already masked by a fused ReLU.
  void (*conv2d_backward)(const Shape& x_shape, const Shape& w_shape, const Tensor& x, const Tensor& w,
                          const Tensor& grad_out, const ConvParams& p, const Tensor& grad_x,
                          const Tensor& grad_w, const Tensor& grad_bias);

  // --- batch norm: x contiguous or channels-last; out (returned) in x's layout. Training
  // updates running_mean/var when defined.
  Tensor (*batch_norm_forward)(const Tensor& x, const Tensor& weight, const Tensor& bias,
                               const Tensor& running_mean, const Tensor& running_var, bool keep_for_backward,
                               BatchNormSaved& saved);
  // grad_out in saved.x's layout; all three gradients written.
  void (*batch_norm_backward)(const BatchNormSaved& saved, const Tensor& grad_out, const Tensor& grad_x,
                              const Tensor& grad_weight, const Tensor& grad_bias);

  // --- synchronised batch norm's passes (backend/cuda/kernels.h has the contract):
  // contiguous NCHW f32; the cross-rank sums happen between them, in ops/sync_batch_norm.cpp.
  void (*sync_bn_sum)(const Tensor& x, const Tensor& stats);
  void (*sync_bn_sum_sq_dev)(const Tensor& x, const Tensor& stats, const Tensor& sq);
  void (*sync_bn_finish_stats)(const Tensor& stats, const Tensor& sq, float eps, float momentum,
                               const Tensor& running_mean, const Tensor& running_var, const Tensor& saved);
  void (*sync_bn_normalize)(const Tensor& x, const Tensor& saved, const Tensor& weight, const Tensor& bias,
                            const Tensor& xhat, const Tensor& out);
  void (*sync_bn_grad_sums)(const Tensor& grad_out, const Tensor& xhat, const Tensor& sums,
                            const Tensor& grad_bias, const Tensor& grad_weight);
  void (*sync_bn_grad_input)(const Tensor& grad_out, const Tensor& xhat, const Tensor& weight,
                             const Tensor& saved, const Tensor& stats, const Tensor& sums,
                             const Tensor& grad_x);

  // --- pooling: x and out contiguous or channels-last, one layout
  void (*pool2d_forward)(PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out,
                         bool keep_for_backward, PoolSaved& saved);
  void (*pool2d_backward)(PoolKind kind, const PoolSaved& saved, const Tensor& grad_out, const PoolParams& p,
                          const Tensor& grad_x);
  void (*global_avg_pool2d_forward)(const Tensor& x, const Tensor& out);             // out [N, C]
  void (*global_avg_pool2d_backward)(const Tensor& grad_out, const Tensor& grad_x);  // grad_out contiguous
  // ResNet's option-A shortcut: out[:, :C] = x[:, :, ::stride, ::stride], the other channels 0.
  void (*shortcut_pad_forward)(const Tensor& x, int64_t stride, const Tensor& out);
  void (*shortcut_pad_backward)(const Tensor& grad_out, int64_t stride, const Tensor& grad_x);

  // --- losses: contiguous [rows, cols] f32, labels contiguous i64 [rows], losses [] f32
  // First row whose label is outside [0, classes), its label in *label; -1 when none.
  int64_t (*first_bad_label)(const Tensor& labels, int64_t classes, int64_t* label);
  void (*log_softmax_forward)(const Tensor& x, const Tensor& out);
  void (*log_softmax_backward)(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in);
  void (*nll_forward)(const Tensor& log_probs, const Tensor& labels, const Tensor& loss);
  void (*nll_backward)(const Tensor& labels, const Tensor& grad_loss, const Tensor& grad_in);
  void (*cross_entropy_forward)(const Tensor& logits, const Tensor& labels, float smoothing,
                                const Tensor& log_probs, const Tensor& loss);
  void (*cross_entropy_backward)(const Tensor& log_probs, const Tensor& labels, float smoothing,
                                 const Tensor& grad_loss, const Tensor& grad);
  int64_t (*count_correct)(const Tensor& logits, const Tensor& labels);
  // totals [3] += (loss rows, correct rows, rows) (train/evaluate.cpp).
  void (*eval_totals_add)(const Tensor& totals, const Tensor& loss, const Tensor& logits,
                          const Tensor& labels);

  // --- optimizers (optim/): one fused update over the slots of one device. A non-null
  // *_on_device pointer is read as the kernel runs instead of the value (CUDA graphs).
  void (*sgd_update)(const std::vector<SgdSlot>& slots, int device, float lr, float weight_decay,
                     float momentum, bool nesterov, const float* lr_on_device);
  // scalars_on_device: lr, decay, c1, c2.
  void (*adamw_update)(const std::vector<AdamWSlot>& slots, int device, float lr, float decay, float beta1,
                       float beta2, float eps, float c1, float c2, const float* scalars_on_device);
  void (*ema_update)(const Tensor& average, const Tensor& current, float decay, const float* decay_on_device);
  // *flag (one f32 on the device) = 1 when an element is Inf or NaN; left as it was otherwise.
  void (*flag_nonfinite)(const std::vector<FiniteSlot>& slots, int device, float* flag);
};

// Registers `device`'s table (backend/cuda does at load time). Never called for the CPU.
void kernels_register(DeviceType type, const Kernels* kernels);
// The table for `device`'s type. Throws dpt::Error naming the device when none is
// registered (a CUDA tensor in a build without the CUDA backend).
const Kernels& kernels_for(Device device);

}  // namespace dpt
