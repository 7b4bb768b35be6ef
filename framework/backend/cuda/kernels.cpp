// CUDA's kernel table, registered at load time (registering only stores a pointer: a
// machine without a GPU loads libdpt fine): the kernels of backend/cuda, its uploads,
// graphs and batch staging.
#include "backend/kernels.h"

#include "backend/cuda/batch_upload.h"
#include "backend/cuda/graph.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/upload.h"

namespace dpt::cuda {
namespace {

std::unique_ptr<dpt::Upload> upload_make(size_t capacity, int device) {
  return std::make_unique<Upload>(capacity, device);
}

std::unique_ptr<dpt::BatchUploader> batch_uploader_make(int device) {
  return std::make_unique<BatchUploader>(device);
}

std::unique_ptr<StepGraph> step_graph_make(int device, int warmup, std::function<void()> step) {
  return std::make_unique<GraphedStep>(device, warmup, std::move(step));
}

// The seed is one draw from the caller's generator (see kernels.h).
void dropout_from(const Tensor& x, float p, Rng& rng, const Tensor& mask, const Tensor& out) {
  dropout_forward(x, p, rng.next_u64(), mask, out);
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
