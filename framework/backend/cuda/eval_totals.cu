// eval_totals_add (see kernel_list.h). Correct rows are counted with atomicAdd of 1.0f: every partial count
// is an integer below 2^24, exact in f32, so the result does not depend on the order.
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace dpt::cuda {
namespace {

__global__ void count_correct_kernel(const float* logits, const int64_t* labels, int64_t rows, int64_t cols,
                                     float* correct) {
  for (int64_t r = thread_index(); r < rows; r += thread_count()) {
    const float* row = logits + r * cols;
    int64_t best = 0;
    for (int64_t c = 1; c < cols; ++c)
      if (row[c] > row[best]) best = c;
    if (best == labels[r]) atomicAdd(correct, 1.0f);
  }
}

__global__ void add_loss_kernel(float* totals, const float* loss, int64_t rows) {
  totals[0] += loss[0] * static_cast<float>(rows);
  totals[2] += static_cast<float>(rows);
}

}  // namespace

void eval_totals_add(const Tensor& totals, const Tensor& loss, const Tensor& logits_in,
                     const Tensor& labels) {
  const Device device = totals.device();
  DPT_CHECK(device.is_cuda() && totals.numel() == 3 && totals.is_contiguous() &&
            totals.dtype() == DType::f32 && loss.numel() == 1 && loss.dtype() == DType::f32 &&
            loss.device() == device)
      << "eval_totals_add on cuda: expected f32 totals [3] and a one-element f32 loss on one CUDA device";
  DPT_CHECK(logits_in.dim() == 2 && (logits_in.dtype() == DType::f32 || logits_in.dtype() == DType::bf16) &&
            logits_in.device() == device)
      << "eval_totals_add on cuda: expected f32 or bf16 logits [N, C] on " << device.str();
  // bf16 logits (precision: bf16) are widened first, exactly, so the maxima are theirs.
  Tensor logits = logits_in.dtype() == DType::f32 ? contiguous(logits_in)
                                                  : Tensor::empty(logits_in.shape(), DType::f32, device);
  if (logits_in.dtype() == DType::bf16) cast_copy(logits_in, logits);
  DPT_CHECK(labels.numel() == logits.size(0) && labels.is_contiguous() && labels.dtype() == DType::i64 &&
            labels.device() == device)
      << "eval_totals_add on cuda: expected contiguous i64 labels [" << logits.size(0) << "] on "
      << device.str();
  const int64_t rows = logits.size(0), cols = logits.size(1);
  KernelScope scope(device.index);
  if (rows > 0 && cols > 0) {
    count_correct_kernel<<<grid_for(rows), kBlock, 0, scope.stream()>>>(
        logits.data<float>(), labels.data<int64_t>(), rows, cols, totals.data<float>() + 1);
    DPT_CUDA_LAUNCH_CHECK();
  }
  add_loss_kernel<<<1, 1, 0, scope.stream()>>>(totals.data<float>(), loss.data<float>(), rows);
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace dpt::cuda
