// Loss kernels (see kernel_list.h). One warp per row: a row's classes are read by the warp's
// 32 lanes together and combined with shuffles, which suits the usual 10 to 1000 classes.
// The formulas, and the places where they round to f32, are those of the CPU kernels.
#include "backend/cuda/kernels.h"

#include <cmath>
#include <cstdint>

#include "backend/cuda/allocator.h"
#include "backend/cuda/launch.h"
#include "core/storage.h"

namespace dpt::cuda {
namespace {

constexpr int kRowsPerBlock = kBlock / kWarp;

// Every lane gets the warp's maximum / sum.
__device__ inline float warp_max_all(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ inline double warp_sum_all(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The rows a warp handles: all its lanes see the same r, so shuffles stay uniform.
#define DPT_FOR_EACH_ROW(r, rows)                                                                      \
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; r < (rows); \
       r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock)

// log(sum_c exp(x[c])) for one row, as the CPU computes it: max in f32, exp and sum in
// double, the log rounded to f32 and added to the max.
__device__ inline float row_log_z(const float* x, int64_t cols, int lane) {
  float m = -INFINITY;
  for (int64_t c = lane; c < cols; c += kWarp) m = fmaxf(m, x[c]);
  m = warp_max_all(m);
  double s = 0;
  for (int64_t c = lane; c < cols; c += kWarp) s += exp(static_cast<double>(x[c] - m));
  s = warp_sum_all(s);
  return m + static_cast<float>(log(s));
}

__global__ void log_softmax_forward_kernel(const float* x, float* out, int64_t rows, int64_t cols) {
  int lane = threadIdx.x % kWarp;
  DPT_FOR_EACH_ROW(r, rows) {
    const float* xr = x + r * cols;
    float log_z = row_log_z(xr, cols, lane);
    for (int64_t c = lane; c < cols; c += kWarp) out[r * cols + c] = xr[c] - log_z;
  }
}

__global__ void log_softmax_backward_kernel(const float* out, const float* grad_out, float* grad_in,
                                            int64_t rows, int64_t cols) {
  int lane = threadIdx.x % kWarp;
  DPT_FOR_EACH_ROW(r, rows) {
    const float* g = grad_out + r * cols;
    double s = 0;
    for (int64_t c = lane; c < cols; c += kWarp) s += g[c];
    s = warp_sum_all(s);  // every lane has read its g before any lane writes (grad_in may be grad_out)
    for (int64_t c = lane; c < cols; c += kWarp)
      grad_in[r * cols + c] = g[c] - expf(out[r * cols + c]) * static_cast<float>(s);
  }
}

__global__ void cross_entropy_rows_kernel(const float* logits, const int64_t* labels, float* log_probs,
                                          double* row_loss, int64_t rows, int64_t cols, float smoothing) {
  int lane = threadIdx.x % kWarp;
  DPT_FOR_EACH_ROW(r, rows) {
    const float* xr = logits + r * cols;
    float* lp = log_probs + r * cols;
    float log_z = row_log_z(xr, cols, lane);
    double row_sum = 0;
    for (int64_t c = lane; c < cols; c += kWarp) {
      lp[c] = xr[c] - log_z;
      row_sum += lp[c];
    }
    row_sum = warp_sum_all(row_sum);
    if (lane == 0) {
      float label_lp = xr[labels[r]] - log_z;
      double s = smoothing;
      row_loss[r] = -(1.0 - s) * label_lp - (smoothing > 0 ? s / static_cast<double>(cols) * row_sum : 0.0);
    }
  }
}

// loss[0] = sum(values) / rows, one block, in index order.
__global__ void mean_kernel(const double* values, int64_t rows, float* loss) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) s += values[i];
  s = block_sum(s);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(s / static_cast<double>(rows));
}

__global__ void cross_entropy_backward_kernel(const float* log_probs, const int64_t* labels, float* grad,
                                              int64_t rows, int64_t cols, float smoothing,
                                              const float* grad_loss) {
  const float scale = grad_loss[0] / static_cast<float>(rows);
  const float uniform = smoothing / static_cast<float>(cols);
  for (int64_t i = thread_index(); i < rows * cols; i += thread_count()) {
    int64_t r = i / cols, c = i % cols;
    float target = uniform + (c == labels[r] ? 1.0f - smoothing : 0.0f);
    grad[i] = scale * (expf(log_probs[i]) - target);
  }
}

__global__ void nll_forward_kernel(const float* log_probs, const int64_t* labels, int64_t rows, int64_t cols,
                                   float* loss) {
  double s = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) s -= log_probs[r * cols + labels[r]];
  s = block_sum(s);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(s / static_cast<double>(rows));
}

__global__ void nll_backward_kernel(const int64_t* labels, const float* grad_loss, float* grad, int64_t rows,
                                    int64_t cols) {
  const float v = -grad_loss[0] / static_cast<float>(rows);
  for (int64_t i = thread_index(); i < rows * cols; i += thread_count())
    grad[i] = i % cols == labels[i / cols] ? v : 0.0f;
}

__global__ void first_bad_label_kernel(const int64_t* labels, int64_t rows, int64_t classes,
                                       unsigned long long* first) {
  for (int64_t r = thread_index(); r < rows; r += thread_count())
    if (labels[r] < 0 || labels[r] >= classes) atomicMin(first, static_cast<unsigned long long>(r));
}

__global__ void count_correct_kernel(const float* logits, const int64_t* labels, int64_t rows, int64_t cols,
                                     unsigned long long* correct) {
  int lane = threadIdx.x % kWarp;
  DPT_FOR_EACH_ROW(r, rows) {
    const float* xr = logits + r * cols;
    float best = -INFINITY;
    int64_t best_c = -1;  // none yet
    // NaNs never win (std::max_element never moves to one), except in column 0 (below).
    for (int64_t c = lane; c < cols; c += kWarp)
      if (!isnan(xr[c]) && (best_c < 0 || xr[c] > best)) {
        best = xr[c];
        best_c = c;
      }
    // The largest value, and on ties the smallest column, as std::max_element picks.
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      float other = __shfl_xor_sync(0xffffffffu, best, offset);
      int64_t other_c = __shfl_xor_sync(0xffffffffu, best_c, offset);
      if (other_c >= 0 && (best_c < 0 || other > best || (other == best && other_c < best_c))) {
        best = other;
        best_c = other_c;
      }
    }
    // std::max_element starts at column 0 and nothing compares greater than a NaN there.
    if (isnan(xr[0])) best_c = 0;
    if (lane == 0 && best_c == labels[r]) atomicAdd(correct, 1ull);
  }
}

void check_rows(const char* op, const Tensor& x, const Tensor& labels) {
  DPT_CHECK(x.dim() == 2 && x.is_contiguous() && labels.numel() == x.size(0) &&
            labels.dtype() == DType::i64 && labels.is_contiguous())
      << op << " on cuda: needs contiguous [N, C] f32 and contiguous i64 [N] labels";
}

// Copies one value from the device; waits for the GPU.
template <class T>
T read_back(const T* device_ptr, Device device) {
  T value{};
  copy_bytes(&value, Device::cpu(), device_ptr, device, sizeof(T));
  return value;
}

}  // namespace

int64_t first_bad_label(const Tensor& labels, int64_t classes, int64_t* label) {
  int64_t rows = labels.numel();
  if (rows == 0) return -1;
  DPT_CHECK(labels.dtype() == DType::i64 && labels.is_contiguous()) << "labels on cuda: needs contiguous i64";
  int device = labels.device().index;
  DeviceBuffer first(sizeof(unsigned long long), device);
  {
    KernelScope scope(device);
    CUDA_CHECK(cudaMemsetAsync(first.as<void>(), 0xff, sizeof(unsigned long long), scope.stream()));
    first_bad_label_kernel<<<grid_for(rows), kBlock, 0, scope.stream()>>>(
        labels.data<int64_t>(), rows, classes, first.as<unsigned long long>());
    DPT_CUDA_LAUNCH_CHECK();
  }
  unsigned long long row = read_back(first.as<unsigned long long>(), labels.device());
  if (row == ~0ull) return -1;
  *label = read_back(labels.data<int64_t>() + row, labels.device());
  return static_cast<int64_t>(row);
}

void log_softmax_forward(const Tensor& x, const Tensor& out) {
  int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0 || cols == 0) return;
  KernelScope scope(x.device().index);
  log_softmax_forward_kernel<<<grid_for(rows, kRowsPerBlock), kBlock, 0, scope.stream()>>>(
      x.data<float>(), out.data<float>(), rows, cols);
  DPT_CUDA_LAUNCH_CHECK();
}

void log_softmax_backward(const Tensor& out, const Tensor& grad_out, const Tensor& grad_in) {
  int64_t rows = out.size(0), cols = out.size(1);
  if (rows == 0 || cols == 0) return;
  KernelScope scope(out.device().index);
  log_softmax_backward_kernel<<<grid_for(rows, kRowsPerBlock), kBlock, 0, scope.stream()>>>(
      out.data<float>(), grad_out.data<float>(), grad_in.data<float>(), rows, cols);
  DPT_CUDA_LAUNCH_CHECK();
}

void nll_forward(const Tensor& log_probs, const Tensor& labels, const Tensor& loss) {
  check_rows("nll_loss", log_probs, labels);
  KernelScope scope(log_probs.device().index);
  nll_forward_kernel<<<1, kBlock, 0, scope.stream()>>>(log_probs.data<float>(), labels.data<int64_t>(),
                                                       log_probs.size(0), log_probs.size(1),
                                                       loss.data<float>());
  DPT_CUDA_LAUNCH_CHECK();
}

void nll_backward(const Tensor& labels, const Tensor& grad_loss, const Tensor& grad_in) {
  check_rows("nll_loss backward", grad_in, labels);
  int64_t rows = grad_in.size(0), cols = grad_in.size(1);
  if (rows * cols == 0) return;
  KernelScope scope(grad_in.device().index);
  nll_backward_kernel<<<grid_for(rows * cols), kBlock, 0, scope.stream()>>>(
      labels.data<int64_t>(), grad_loss.data<float>(), grad_in.data<float>(), rows, cols);
  DPT_CUDA_LAUNCH_CHECK();
}

void cross_entropy_forward(const Tensor& logits, const Tensor& labels, float smoothing,
                           const Tensor& log_probs, const Tensor& loss) {
  check_rows("cross_entropy", logits, labels);
  int64_t rows = logits.size(0), cols = logits.size(1);
  int device = logits.device().index;
  DeviceBuffer row_loss(rows * sizeof(double), device);
  KernelScope scope(device);
  cross_entropy_rows_kernel<<<grid_for(rows, kRowsPerBlock), kBlock, 0, scope.stream()>>>(
      logits.data<float>(), labels.data<int64_t>(), log_probs.data<float>(), row_loss.as<double>(), rows,
      cols, smoothing);
  DPT_CUDA_LAUNCH_CHECK();
  mean_kernel<<<1, kBlock, 0, scope.stream()>>>(row_loss.as<double>(), rows, loss.data<float>());
  DPT_CUDA_LAUNCH_CHECK();
}

void cross_entropy_backward(const Tensor& log_probs, const Tensor& labels, float smoothing,
                            const Tensor& grad_loss, const Tensor& grad) {
  check_rows("cross_entropy backward", log_probs, labels);
  int64_t rows = log_probs.size(0), cols = log_probs.size(1);
  if (rows * cols == 0) return;
  KernelScope scope(grad.device().index);
  cross_entropy_backward_kernel<<<grid_for(rows * cols), kBlock, 0, scope.stream()>>>(
      log_probs.data<float>(), labels.data<int64_t>(), grad.data<float>(), rows, cols, smoothing,
      grad_loss.data<float>());
  DPT_CUDA_LAUNCH_CHECK();
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  check_rows("count_correct", logits, labels);
  int64_t rows = logits.size(0), cols = logits.size(1);
  if (rows == 0 || cols == 0) return 0;
  int device = logits.device().index;
  DeviceBuffer correct(sizeof(unsigned long long), device);
  {
    KernelScope scope(device);
    CUDA_CHECK(cudaMemsetAsync(correct.as<void>(), 0, sizeof(unsigned long long), scope.stream()));
    count_correct_kernel<<<grid_for(rows, kRowsPerBlock), kBlock, 0, scope.stream()>>>(
        logits.data<float>(), labels.data<int64_t>(), rows, cols, correct.as<unsigned long long>());
    DPT_CUDA_LAUNCH_CHECK();
  }
  return static_cast<int64_t>(read_back(correct.as<unsigned long long>(), logits.device()));
}

}  // namespace dpt::cuda
