// The CPU's kernel table: the kernels of backend/cpu, and the few lines that bring the
// table's tensors to the plain-loop kernels' raw pointers.
#include "backend/cpu/kernels.h"

#include <cstring>

#include "backend/cpu/activation.h"
#include "backend/cpu/batchnorm.h"
#include "backend/cpu/conv.h"
#include "backend/cpu/dropout.h"
#include "backend/cpu/elementwise.h"
#include "backend/cpu/loss.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/optim.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/shortcut_pad.h"
#include "backend/cpu/sync_batchnorm.h"

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

void add_inplace_tensor(const Tensor& dst, const Tensor& src) {
  add_inplace(dst.data<float>(), src.data<float>(), dst.numel());
}

void relu_forward_tensor(const Tensor& x, const Tensor& out) {
  relu_forward(x.data<float>(), out.data<float>(), out.numel());
}

void add_relu_forward_tensor(const Tensor& a, const Tensor& b, const Tensor& out) {
  add_relu_forward(a.data<float>(), b.data<float>(), out.data<float>(), out.numel());
}

void relu_backward_tensor(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in) {
  relu_backward(out.data<float>(), grad_out.data<float>(), grad_in.data<float>(), out.numel());
}

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
    .add_inplace = add_inplace_tensor,
    .sum_to_shape = sum_to_shape,
    .sum_scaled = sum_scaled,
    .fill_scaled = fill_scaled,
    .relu_forward = relu_forward_tensor,
    .add_relu_forward = add_relu_forward_tensor,
    .relu_backward = relu_backward_tensor,
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
