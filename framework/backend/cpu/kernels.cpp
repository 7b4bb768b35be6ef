// The CPU's kernel table: the kernels of backend/cpu (kernels.h).
#include "backend/cpu/kernels.h"

#include <cstring>

namespace dpt::cpu {
namespace {

// Host memory is the device's: an upload is a copy.
class HostUpload final : public Upload {
 public:
  void copy(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};

bool never_capturing(int) { return false; }

void copy(const Tensor& src, const Tensor& dst) {
  DPT_CHECK(src.dtype() == dst.dtype())
      << "copy on the CPU: no dtype conversion (the CPU kernels are f32), got " << dtype_name(src.dtype())
      << " to " << dtype_name(dst.dtype());
  dst.copy_from(src);
}

std::unique_ptr<Upload> upload_make(size_t, int) { return std::make_unique<HostUpload>(); }

const Kernels kTable = {
    .name = "CPU",
    .bf16 = false,
    .capturing = never_capturing,
    .copy = copy,
    .upload_make = upload_make,
    .batch_uploader_make = nullptr,
    .step_graph_make = nullptr,
    .binary = binary,
    .affine = affine,
    .add_inplace = add_inplace,
    .sum_to_shape = sum_to_shape,
    .sum_scaled = sum_scaled,
    .fill_scaled = fill_scaled,
    .relu_forward = relu_forward,
    .add_relu_forward = add_relu_forward,
    .relu_backward = relu_backward,
    .dropout_forward = dropout_forward,
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

}  // namespace

const Kernels& kernels() { return kTable; }

}  // namespace dpt::cpu
