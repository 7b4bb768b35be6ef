// CUDA's kernel table, registered at load time (registering only stores a pointer: a
// machine without a GPU loads libdpt fine). Each entry is a kernel of backend/cuda, or a
// few lines that choose the layouts cuDNN runs in and what its backward keeps.
#include "backend/kernels.h"

#include "backend/cuda/activation.h"
#include "backend/cuda/batch_upload.h"
#include "backend/cuda/batchnorm.h"
#include "backend/cuda/cast.h"
#include "backend/cuda/conv.h"
#include "backend/cuda/dropout.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/eval_totals.h"
#include "backend/cuda/graph.h"
#include "backend/cuda/layout.h"
#include "backend/cuda/loss.h"
#include "backend/cuda/matmul.h"
#include "backend/cuda/optim.h"
#include "backend/cuda/pool.h"
#include "backend/cuda/reduce.h"
#include "backend/cuda/shortcut_pad.h"
#include "backend/cuda/sync_batchnorm.h"
#include "backend/cuda/upload.h"

namespace dpt::cuda {
namespace {

class StagedUpload final : public dpt::Upload {
 public:
  StagedUpload(size_t capacity, int device) : upload_(capacity, device) {}
  void copy(void* dst, const void* src, size_t bytes) override { upload_.copy(dst, src, bytes); }

 private:
  cuda::Upload upload_;
};

class CapturedStep final : public StepGraph {
 public:
  CapturedStep(int device, int warmup, std::function<void()> step) : step_(device, warmup, std::move(step)) {}
  void run() override { step_.run(); }
  bool graphed() const override { return step_.graphed(); }
  size_t node_count() const override { return step_.graph().node_count(); }

 private:
  GraphedStep step_;
};

class StagedBatches final : public dpt::BatchUploader {
 public:
  explicit StagedBatches(int device) : uploader_(device) {}
  void start(const std::vector<Tensor>& host) override { uploader_.start(host); }
  bool pending() const override { return uploader_.pending(); }
  std::vector<Tensor> take() override { return uploader_.take(); }
  void drop() override { uploader_.drop(); }

 private:
  cuda::BatchUploader uploader_;
};

std::unique_ptr<dpt::Upload> upload_make(size_t capacity, int device) {
  return std::make_unique<StagedUpload>(capacity, device);
}

std::unique_ptr<dpt::BatchUploader> batch_uploader_make(int device) { return std::make_unique<StagedBatches>(device); }

std::unique_ptr<StepGraph> step_graph_make(int device, int warmup, std::function<void()> step) {
  return std::make_unique<CapturedStep>(device, warmup, std::move(step));
}

// The seed is one draw from the caller's generator (see dropout.h).
void dropout_from(const Tensor& x, float p, Rng& rng, const Tensor& mask, const Tensor& out) {
  dropout_forward(x, p, rng.next_u64(), mask, out);
}

// t in the layout the kernels run in: contiguous NCHW, or channels-last when nhwc.
Tensor in_layout(const Tensor& t, bool nhwc) {
  if (!nhwc) return contiguous(t);
  if (t.is_channels_last()) return t;
  Tensor out = Tensor::empty_channels_last(t.shape(), t.dtype(), t.device());
  cast_copy(t, out);
  return out;
}

// cuDNN runs NCHW with OIHW weights, or NHWC with OHWI weights: NHWC when asked for or
// when the input already is; f32, or bf16 on tensor cores.
ConvForward conv2d_forward_run(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const ConvParams& p,
                               bool relu, const Shape& out_shape) {
  ConvForward run;
  run.params = p;
  run.params.nhwc = p.nhwc || (x_in.is_channels_last() && !x_in.is_contiguous());
  run.x = in_layout(x_in, run.params.nhwc);
  run.w = in_layout(w_in, run.params.nhwc);
  run.out = empty_in_layout(out_shape, x_in.dtype(), x_in.device(), run.params.nhwc);
  conv2d_forward(run.x, run.w, bias.defined() ? contiguous(bias) : Tensor(), run.params, relu, run.out);
  return run;
}

// Training keeps cuDNN's saved batch mean and 1/sqrt(var + eps); the backward of a fused
// ReLU reads the output, whose > 0 is the mask.
Tensor batch_norm_forward_run(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& running_mean, const Tensor& running_var, bool, BatchNormSaved& s) {
  const BatchNormParams& p = s.params;
  Tensor out = Tensor::empty_like(x);
  if (p.training) {
    s.mean = Tensor::empty({x.size(1)}, DType::f32, x.device());
    s.stat = Tensor::empty({x.size(1)}, DType::f32, x.device());
    batch_norm_forward_training(x, weight, bias, running_mean, running_var, p.momentum, p.eps, p.relu, out, s.mean,
                                s.stat);
  } else {
    batch_norm_forward_inference(x, weight, bias, s.mean, s.stat, p.eps, p.relu, out);
  }
  if (p.relu) s.out = out.detach();
  return out;
}

void batch_norm_backward_run(const BatchNormSaved& s, const Tensor& grad_out, const Tensor& grad_x,
                             const Tensor& grad_weight, const Tensor& grad_bias) {
  if (s.params.training)
    batch_norm_backward_training(s.x, grad_out, s.out, s.weight, s.mean, s.stat, s.params.eps, grad_x, grad_weight,
                                 grad_bias);
  else
    batch_norm_backward_inference(s.x, grad_out, s.out, s.weight, s.mean, s.stat, s.params.eps, grad_x,
                                  grad_weight, grad_bias);
}

// cuDNN's pooling backward rereads the input and the output.
void pool2d_forward_run(PoolKind kind, const Tensor& x, const PoolParams& p, const Tensor& out,
                        bool keep_for_backward, PoolSaved& saved) {
  pool2d_forward(kind, x, p, out);
  if (keep_for_backward) saved = {x.detach(), out.detach(), Tensor()};
}

void pool2d_backward_run(PoolKind kind, const PoolSaved& saved, const Tensor& grad_out, const PoolParams& p,
                         const Tensor& grad_x) {
  pool2d_backward(kind, saved.x, saved.out, grad_out, p, grad_x);
}

const Kernels kTable = {
    .name = "CUDA",
    .bf16 = true,
    .capturing = capture_active,
    .copy = cast_copy,
    .upload_make = upload_make,
    .batch_uploader_make = batch_uploader_make,
    .step_graph_make = step_graph_make,
    .binary = binary,
    .affine = affine,
    .add_inplace = add_inplace,
    .sum_to_shape = sum_to_shape,
    .sum_scaled = sum_scaled,
    .fill_scaled = fill_scaled,
    .relu_forward = relu_forward,
    .add_relu_forward = add_relu_forward,
    .relu_backward = relu_backward,
    .dropout_forward = dropout_from,
    .matmul = matmul,
    .sum_rows = sum_rows,
    .conv2d_forward = conv2d_forward_run,
    .conv2d_backward = conv2d_backward,
    .batch_norm_forward = batch_norm_forward_run,
    .batch_norm_backward = batch_norm_backward_run,
    .sync_bn_sum = sync_bn_sum,
    .sync_bn_sum_sq_dev = sync_bn_sum_sq_dev,
    .sync_bn_finish_stats = sync_bn_finish_stats,
    .sync_bn_normalize = sync_bn_normalize,
    .sync_bn_grad_sums = sync_bn_grad_sums,
    .sync_bn_grad_input = sync_bn_grad_input,
    .pool2d_forward = pool2d_forward_run,
    .pool2d_backward = pool2d_backward_run,
    .global_avg_pool2d_forward = global_avg_pool2d_forward,
    .global_avg_pool2d_backward = global_avg_pool2d_backward,
    .shortcut_pad_forward = shortcut_pad_forward,
    .shortcut_pad_backward = shortcut_pad_backward,
    .first_bad_label = first_bad_label,
    .log_softmax_forward = log_softmax_forward,
    .log_softmax_backward = log_softmax_backward,
    .nll_forward = nll_forward,
    .nll_backward = nll_backward,
    .cross_entropy_forward = cross_entropy_forward,
    .cross_entropy_backward = cross_entropy_backward,
    .count_correct = count_correct,
    .eval_totals_add = eval_totals_add,
    .sgd_update = sgd_update,
    .adamw_update = adamw_update,
    .ema_update = ema_update,
    .flag_nonfinite = flag_nonfinite,
};

[[maybe_unused]] const bool registered = [] {
  kernels_register(DeviceType::cuda, &kTable);
  return true;
}();

}  // namespace
}  // namespace dpt::cuda
