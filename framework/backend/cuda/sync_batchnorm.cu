// Kernels of synchronised batch norm (see kernel_list.h). A channel's N H W values lie
// in N runs of H W; the sums use a 2-D grid, blockIdx.y the channel and blockIdx.x one of
// `parts` blocks striding over that channel's values, so a layer with few channels still
// fills the GPU. Each block leaves a double partial; one block per channel then adds its
// partials in index order.
#include "backend/cuda/allocator.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/kernels.h"

namespace dpt::cuda {
namespace {

constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kTargetBlocks = 4096;  // blocks over all channels in a sum's first pass

struct Shape4 {
  int64_t n, c, hw;
  __device__ int64_t index(int64_t i, int64_t ch) const { return ((i / hw) * c + ch) * hw + i % hw; }
};

// The per-element terms of each sum: two at a time (the second may be unused).
struct TermX {
  const float* x;
  __device__ void operator()(int64_t k, double& a, double&) const { a += x[k]; }
};
struct TermSqDev {
  const float* x;
  double mean;
  __device__ void operator()(int64_t k, double& a, double&) const {
    const double d = static_cast<double>(x[k]) - mean;
    a += d * d;
  }
};
struct TermGrad {
  const float* g;
  const float* xhat;
  __device__ void operator()(int64_t k, double& a, double& b) const {
    const double gk = g[k];
    a += gk;
    b += gk * xhat[k];
  }
};

template <class Term>
__device__ void channel_partial(const Term& term, Shape4 s, int64_t ch, double2* partial) {
  double a = 0, b = 0;
  const int64_t count = s.n * s.hw;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    term(s.index(i, ch), a, b);
  a = block_sum(a);
  b = block_sum(b);
  if (threadIdx.x == 0) partial[ch * gridDim.x + blockIdx.x] = make_double2(a, b);
}

__global__ void sum_x_kernel(const float* x, Shape4 s, double2* partial) {
  channel_partial(TermX{x}, s, blockIdx.y, partial);
}

__global__ void sum_sq_dev_kernel(const float* x, const float* stats, Shape4 s, double2* partial) {
  const int64_t ch = blockIdx.y;
  const double mean = static_cast<double>(stats[ch]) / static_cast<double>(stats[s.c]);
  channel_partial(TermSqDev{x, mean}, s, ch, partial);
}

__global__ void sum_grad_kernel(const float* g, const float* xhat, Shape4 s, double2* partial) {
  channel_partial(TermGrad{g, xhat}, s, blockIdx.y, partial);
}

// One block per channel: adds the channel's partials; the first sums go to out_a[ch] (and
// copy_a[ch]), the second to out_b[ch] (and copy_b[ch]) where those are not null.
__global__ void finish_sums_kernel(const double2* partial, unsigned parts, float* out_a, float* out_b,
                                   float* copy_a, float* copy_b) {
  const int64_t ch = blockIdx.x;
  double a = 0, b = 0;
  for (unsigned p = threadIdx.x; p < parts; p += blockDim.x) {
    const double2 v = partial[ch * parts + p];
    a += v.x;
    b += v.y;
  }
  a = block_sum(a);
  b = block_sum(b);
  if (threadIdx.x != 0) return;
  out_a[ch] = static_cast<float>(a);
  if (copy_a) copy_a[ch] = static_cast<float>(a);
  if (out_b) out_b[ch] = static_cast<float>(b);
  if (copy_b) copy_b[ch] = static_cast<float>(b);
}

__global__ void set_count_kernel(float* stats, int64_t c, float count) { stats[c] = count; }

// The CPU's arithmetic exactly: mean and var in double, invstd rounded to f32 once, the
// running statistics updated in f32.
__global__ void finish_stats_kernel(const float* stats, const float* sq, int64_t c, float eps, float momentum,
                                    float* running_mean, float* running_var, float* saved) {
  const double count = stats[c];
  for (int64_t ch = thread_index(); ch < c; ch += thread_count()) {
    const double mean = static_cast<double>(stats[ch]) / count;
    const double var = static_cast<double>(sq[ch]) / count;
    saved[ch] = static_cast<float>(mean);
    saved[c + ch] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
    if (running_mean) {
      running_mean[ch] = (1 - momentum) * running_mean[ch] + momentum * static_cast<float>(mean);
      running_var[ch] =
          (1 - momentum) * running_var[ch] + momentum * static_cast<float>(var * count / (count - 1));
    }
  }
}

__global__ void normalize_kernel(const float* x, const float* saved, const float* weight, const float* bias,
                                 Shape4 s, float* xhat, float* out) {
  const int64_t total = s.n * s.c * s.hw;
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    const int64_t ch = (i / s.hw) % s.c;
    const float xh = (x[i] - saved[ch]) * saved[s.c + ch];
    xhat[i] = xh;
    out[i] = xh * weight[ch] + bias[ch];
  }
}

__global__ void grad_input_kernel(const float* g, const float* xhat, const float* weight, const float* saved,
                                  const float* stats, const float* sums, Shape4 s, float* grad_x) {
  const int64_t total = s.n * s.c * s.hw;
  const double count = stats[s.c];
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    const int64_t ch = (i / s.hw) % s.c;
    const double mean_dy = static_cast<double>(sums[ch]) / count;
    const double mean_dy_xhat = static_cast<double>(sums[s.c + ch]) / count;
    const float scale = weight[ch] * saved[s.c + ch];
    grad_x[i] = static_cast<float>(scale * (static_cast<double>(g[i]) - mean_dy - xhat[i] * mean_dy_xhat));
  }
}

Shape4 shape_of(const char* what, const Tensor& x) {
  DPT_CHECK(x.dim() == 4 && x.is_contiguous() && x.dtype() == DType::f32 && x.device().is_cuda())
      << what << " on cuda: expected a contiguous NCHW f32 CUDA tensor, got " << shape_str(x.shape());
  DPT_CHECK(x.size(1) >= 1 && x.size(1) <= kMaxGridY)
      << what << " on cuda: channels must be in [1, " << kMaxGridY << "], got " << x.size(1);
  return {x.size(0), x.size(1), x.size(2) * x.size(3)};
}

void check_vector(const char* what, const Tensor& t, int64_t n, Device device) {
  DPT_CHECK(t.numel() == n && t.is_contiguous() && t.dtype() == DType::f32 && t.device() == device)
      << what << " on cuda: expected a contiguous f32 tensor of " << n << " elements on " << device.str()
      << ", got " << shape_str(t.shape()) << " on " << t.device().str();
}

// Blocks per channel for the first pass: enough to fill the GPU over all channels, none
// without work.
unsigned parts_for(const Shape4& s) {
  const int64_t per_channel = s.n * s.hw;
  const int64_t by_work = std::max<int64_t>(1, (per_channel + kBlock - 1) / kBlock);
  return static_cast<unsigned>(std::min(by_work, std::max<int64_t>(1, kTargetBlocks / s.c)));
}

// Runs the first pass (`launch(grid, partial)`) and the per-channel finish.
template <class Launch>
void channel_sums(const Shape4& s, int device, Launch launch, float* out_a, float* out_b, float* copy_a,
                  float* copy_b) {
  const unsigned parts = parts_for(s);
  DeviceBuffer partial(static_cast<size_t>(s.c) * parts * sizeof(double2), device);
  KernelScope scope(device);
  launch(dim3(parts, static_cast<unsigned>(s.c)), scope.stream(), partial.as<double2>());
  DPT_CUDA_LAUNCH_CHECK();
  finish_sums_kernel<<<static_cast<unsigned>(s.c), kBlock, 0, scope.stream()>>>(partial.as<double2>(), parts,
                                                                                out_a, out_b, copy_a, copy_b);
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void sync_bn_sum(const Tensor& x, const Tensor& stats) {
  const Shape4 s = shape_of("sync_batch_norm2d", x);
  check_vector("sync_batch_norm2d stats", stats, s.c + 1, x.device());
  const int device = x.device().index;
  channel_sums(
      s, device,
      [&](dim3 grid, cudaStream_t stream, double2* partial) {
        sum_x_kernel<<<grid, kBlock, 0, stream>>>(x.data<float>(), s, partial);
      },
      stats.data<float>(), nullptr, nullptr, nullptr);
  KernelScope scope(device);
  set_count_kernel<<<1, 1, 0, scope.stream()>>>(stats.data<float>(), s.c, static_cast<float>(s.n * s.hw));
  DPT_CUDA_LAUNCH_CHECK();
}

void sync_bn_sum_sq_dev(const Tensor& x, const Tensor& stats, const Tensor& sq) {
  const Shape4 s = shape_of("sync_batch_norm2d", x);
  check_vector("sync_batch_norm2d stats", stats, s.c + 1, x.device());
  check_vector("sync_batch_norm2d squares", sq, s.c, x.device());
  channel_sums(
      s, x.device().index,
      [&](dim3 grid, cudaStream_t stream, double2* partial) {
        sum_sq_dev_kernel<<<grid, kBlock, 0, stream>>>(x.data<float>(), stats.data<float>(), s, partial);
      },
      sq.data<float>(), nullptr, nullptr, nullptr);
}

void sync_bn_finish_stats(const Tensor& stats, const Tensor& sq, float eps, float momentum,
                          const Tensor& running_mean, const Tensor& running_var, const Tensor& saved) {
  const int64_t c = sq.numel();
  const Device device = sq.device();
  check_vector("sync_batch_norm2d stats", stats, c + 1, device);
  check_vector("sync_batch_norm2d saved", saved, 2 * c, device);
  DPT_CHECK(running_mean.defined() == running_var.defined())
      << "sync_batch_norm2d on cuda: running_mean and running_var come together";
  if (running_mean.defined()) {
    check_vector("sync_batch_norm2d running_mean", running_mean, c, device);
    check_vector("sync_batch_norm2d running_var", running_var, c, device);
  }
  KernelScope scope(device.index);
  finish_stats_kernel<<<grid_for(c), kBlock, 0, scope.stream()>>>(
      stats.data<float>(), sq.data<float>(), c, eps, momentum,
      running_mean.defined() ? running_mean.data<float>() : nullptr,
      running_var.defined() ? running_var.data<float>() : nullptr, saved.data<float>());
  DPT_CUDA_LAUNCH_CHECK();
}

void sync_bn_normalize(const Tensor& x, const Tensor& saved, const Tensor& weight, const Tensor& bias,
                       const Tensor& xhat, const Tensor& out) {
  const Shape4 s = shape_of("sync_batch_norm2d", x);
  const Device device = x.device();
  check_vector("sync_batch_norm2d saved", saved, 2 * s.c, device);
  check_vector("sync_batch_norm2d weight", weight, s.c, device);
  check_vector("sync_batch_norm2d bias", bias, s.c, device);
  shape_of("sync_batch_norm2d xhat", xhat);
  shape_of("sync_batch_norm2d out", out);
  const int64_t total = x.numel();
  if (total == 0) return;
  KernelScope scope(device.index);
  normalize_kernel<<<grid_for(total), kBlock, 0, scope.stream()>>>(x.data<float>(), saved.data<float>(),
                                                                   weight.data<float>(), bias.data<float>(),
                                                                   s, xhat.data<float>(), out.data<float>());
  DPT_CUDA_LAUNCH_CHECK();
}

void sync_bn_grad_sums(const Tensor& grad_out, const Tensor& xhat, const Tensor& sums,
                       const Tensor& grad_bias, const Tensor& grad_weight) {
  const Shape4 s = shape_of("sync_batch_norm2d backward", grad_out);
  DPT_CHECK(xhat.shape() == grad_out.shape())
      << "sync_batch_norm2d backward on cuda: xhat and gradient shapes differ";
  shape_of("sync_batch_norm2d backward xhat", xhat);
  const Device device = grad_out.device();
  check_vector("sync_batch_norm2d backward sums", sums, 2 * s.c, device);
  check_vector("sync_batch_norm2d grad_bias", grad_bias, s.c, device);
  check_vector("sync_batch_norm2d grad_weight", grad_weight, s.c, device);
  float* both = sums.data<float>();
  channel_sums(
      s, device.index,
      [&](dim3 grid, cudaStream_t stream, double2* partial) {
        sum_grad_kernel<<<grid, kBlock, 0, stream>>>(grad_out.data<float>(), xhat.data<float>(), s, partial);
      },
      both, both + s.c, grad_bias.data<float>(), grad_weight.data<float>());
}

void sync_bn_grad_input(const Tensor& grad_out, const Tensor& xhat, const Tensor& weight, const Tensor& saved,
                        const Tensor& stats, const Tensor& sums, const Tensor& grad_x) {
  const Shape4 s = shape_of("sync_batch_norm2d backward", grad_out);
  const Device device = grad_out.device();
  shape_of("sync_batch_norm2d backward xhat", xhat);
  shape_of("sync_batch_norm2d grad_x", grad_x);
  check_vector("sync_batch_norm2d weight", weight, s.c, device);
  check_vector("sync_batch_norm2d saved", saved, 2 * s.c, device);
  check_vector("sync_batch_norm2d stats", stats, s.c + 1, device);
  check_vector("sync_batch_norm2d backward sums", sums, 2 * s.c, device);
  const int64_t total = grad_out.numel();
  if (total == 0) return;
  KernelScope scope(device.index);
  grad_input_kernel<<<grid_for(total), kBlock, 0, scope.stream()>>>(
      grad_out.data<float>(), xhat.data<float>(), weight.data<float>(), saved.data<float>(),
      stats.data<float>(), sums.data<float>(), s, grad_x.data<float>());
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace dpt::cuda
