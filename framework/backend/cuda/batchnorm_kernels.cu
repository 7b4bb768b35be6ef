// Batch-norm kernels (see kernels.h). Per-channel sums go in two stages: blocks
// sum chunks of a channel's N*H*W values into double partials (enough blocks to fill the
// GPU even with 16 channels), then one thread per channel adds its chunks in a fixed order,
// so results do not depend on scheduling, and turns them into per-channel coefficients
// that one elementwise pass applies. NCHW blocks walk one channel's rows; NHWC blocks take
// 32 neighbouring channels (threadIdx.x) of 8 rows at a time (threadIdx.y), so each warp
// reads consecutive addresses in both layouts. A ReLU fused after the normalisation costs no
// pass of its own: the forward's elementwise pass clamps, and the backward masks grad_out
// by the saved output wherever it reads it (both sums and grad_x), so no masked copy of
// the gradient is made.
#include <type_traits>

#include "backend/cuda/allocator.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/layout.h"

namespace dpt::cuda::bn_kernels {
namespace {

constexpr int kChannelTile = 32;                     // NHWC: channels per block
constexpr int kRowsPerStep = kBlock / kChannelTile;  // NHWC: rows per block step
constexpr int64_t kTargetBlocks = 1024;              // a few blocks per SM on an H100/H200

// One call's shape: m = N*H*W values per channel, c channels, hw = H*W; the values of a
// channel are split into `chunks` runs of `per_chunk`.
struct Geometry {
  int64_t m = 0, c = 0, hw = 0;
  int64_t chunks = 1, per_chunk = 1;
  bool nhwc = false;
};

Geometry geometry_of(const Tensor& x) {
  Geometry g;
  g.c = x.size(1);
  g.hw = x.size(2) * x.size(3);
  g.m = x.size(0) * g.hw;
  g.nhwc = layout_nhwc(x, "batch_norm2d");
  DPT_CHECK(g.c <= 65535) << "batch_norm2d on cuda: at most 65535 channels, got " << g.c;
  int64_t channel_blocks = g.nhwc ? (g.c + kChannelTile - 1) / kChannelTile : g.c;
  int64_t chunks = std::max<int64_t>(
      1, std::min((kTargetBlocks + channel_blocks - 1) / channel_blocks, (g.m + 1023) / 1024));
  g.per_chunk = std::max<int64_t>(1, (g.m + chunks - 1) / chunks);
  g.chunks = std::max<int64_t>(1, (g.m + g.per_chunk - 1) / g.per_chunk);
  return g;
}

enum class Sums {
  stats,  // (x, x^2)
  grads,  // (g, g (x - mean[c]))
};

// grad_out[k], or 0 where a fused ReLU's output relu_out[k] was not > 0 (relu_backward's
// mask; relu_out is null when no ReLU was fused).
template <class T>
__device__ __forceinline__ float masked_grad(const T* g, const T* relu_out, int64_t k) {
  float gv = to_float(g[k]);
  return relu_out == nullptr || to_float(relu_out[k]) > 0.0f ? gv : 0.0f;
}

template <Sums kind, class T>
__device__ __forceinline__ void accumulate(int64_t k, int64_t c, const T* x, const T* g, const T* relu_out,
                                           const float* mean, double& a, double& b) {
  float v = to_float(x[k]);
  if constexpr (kind == Sums::stats) {
    a += v;
    b += static_cast<double>(v) * v;
  } else {
    float gv = masked_grad(g, relu_out, k);
    a += gv;
    b += static_cast<double>(gv) * (v - mean[c]);
  }
}

// partial[(chunk * C + c) * 2 + {0, 1}] = the two sums over one chunk of channel c.
template <Sums kind, class T>
__global__ void partials_nchw(const T* x, const T* g, const T* relu_out, const float* mean, double* partial,
                              Geometry geo) {
  const int64_t c = blockIdx.y, chunk = blockIdx.x;
  const int64_t begin = chunk * geo.per_chunk, end = min(geo.m, begin + geo.per_chunk);
  double a = 0, b = 0;
  for (int64_t m = begin + threadIdx.x; m < end; m += blockDim.x)
    accumulate<kind>(((m / geo.hw) * geo.c + c) * geo.hw + m % geo.hw, c, x, g, relu_out, mean, a, b);
  a = block_sum(a);
  b = block_sum(b);
  if (threadIdx.x == 0) {
    partial[(chunk * geo.c + c) * 2] = a;
    partial[(chunk * geo.c + c) * 2 + 1] = b;
  }
}

template <Sums kind, class T>
__global__ void partials_nhwc(const T* x, const T* g, const T* relu_out, const float* mean, double* partial,
                              Geometry geo) {
  __shared__ double sums[2][kRowsPerStep][kChannelTile + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kChannelTile + threadIdx.x, chunk = blockIdx.x;
  const int64_t begin = chunk * geo.per_chunk, end = min(geo.m, begin + geo.per_chunk);
  double a = 0, b = 0;
  if (c < geo.c)
    for (int64_t m = begin + threadIdx.y; m < end; m += kRowsPerStep)
      accumulate<kind>(m * geo.c + c, c, x, g, relu_out, mean, a, b);
  sums[0][threadIdx.y][threadIdx.x] = a;
  sums[1][threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < geo.c) {
    a = b = 0;
    for (int r = 0; r < kRowsPerStep; ++r) {
      a += sums[0][r][threadIdx.x];
      b += sums[1][r][threadIdx.x];
    }
    partial[(chunk * geo.c + c) * 2] = a;
    partial[(chunk * geo.c + c) * 2 + 1] = b;
  }
}

// The chunks of channel c, added in chunk order.
__device__ inline void channel_totals(const double* partial, const Geometry& geo, int64_t c, double& a,
                                      double& b) {
  a = b = 0;
  for (int64_t k = 0; k < geo.chunks; ++k) {
    a += partial[(k * geo.c + c) * 2];
    b += partial[(k * geo.c + c) * 2 + 1];
  }
}

// Batch mean and biased variance; out = x scale + shift with scale = weight invstd and
// shift = bias - mean scale; the running statistics take the unbiased variance.
__global__ void finalize_stats(const double* partial, Geometry geo, const float* weight, const float* bias,
                               float* running_mean, float* running_var, float momentum, float eps,
                               float* save_mean, float* save_invstd, float* scale, float* shift) {
  for (int64_t c = thread_index(); c < geo.c; c += thread_count()) {
    double sum, sum_sq;
    channel_totals(partial, geo, c, sum, sum_sq);
    double mean = sum / geo.m;
    double var = fmax(sum_sq / geo.m - mean * mean, 0.0);
    float invstd = static_cast<float>(1.0 / sqrt(var + eps));
    save_mean[c] = static_cast<float>(mean);
    save_invstd[c] = invstd;
    scale[c] = weight[c] * invstd;
    shift[c] = bias[c] - static_cast<float>(mean) * scale[c];
    if (running_mean != nullptr) {
      running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * static_cast<float>(mean);
      running_var[c] =
          (1.0f - momentum) * running_var[c] + momentum * static_cast<float>(var * geo.m / (geo.m - 1));
    }
  }
}

__global__ void eval_coefficients(const float* weight, const float* bias, const float* mean, const float* var,
                                  float eps, float* scale, float* shift, int64_t channels) {
  for (int64_t c = thread_index(); c < channels; c += thread_count()) {
    float invstd = 1.0f / sqrtf(var[c] + eps);
    scale[c] = weight[c] * invstd;
    shift[c] = bias[c] - mean[c] * scale[c];
  }
}

// With g the gradient (masked by a fused ReLU): grad_bias = sum g, grad_weight = invstd sum
// g (x - mean); then dx = a (g - b - (x - mean) d) with a = weight invstd and, in training
// (batch statistics), b = sum g / M and d = invstd^2 sum g (x - mean) / M; in eval b = d = 0.
// invstd is given, or 1/sqrt(var + eps).
__global__ void finalize_grads(const double* partial, Geometry geo, const float* weight, const float* invstd,
                               const float* var, float eps, bool training, float* grad_weight,
                               float* grad_bias, float* coef) {
  for (int64_t c = thread_index(); c < geo.c; c += thread_count()) {
    double sum_g, sum_gx;
    channel_totals(partial, geo, c, sum_g, sum_gx);
    float is = invstd != nullptr ? invstd[c] : 1.0f / sqrtf(var[c] + eps);
    grad_bias[c] = static_cast<float>(sum_g);
    grad_weight[c] = static_cast<float>(sum_gx * is);
    coef[3 * c] = weight[c] * is;
    coef[3 * c + 1] = training ? static_cast<float>(sum_g / geo.m) : 0.0f;
    coef[3 * c + 2] = training ? static_cast<float>(sum_gx / geo.m) * is * is : 0.0f;
  }
}

template <bool nhwc>
__device__ __forceinline__ int64_t channel_of(int64_t i, int64_t c, int64_t hw) {
  return nhwc ? i % c : (i / hw) % c;
}

// With relu, max(0, y) as relu_forward computes it (a NaN becomes 0).
template <class T, bool nhwc>
__global__ void normalize_kernel(const T* x, T* out, const float* scale, const float* shift, bool relu,
                                 int64_t n, int64_t c, int64_t hw) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    int64_t ch = channel_of<nhwc>(i, c, hw);
    float y = to_float(x[i]) * scale[ch] + shift[ch];
    if (relu) y = y > 0.0f ? y : 0.0f;
    out[i] = from_float<T>(y);
  }
}

// Eval reads no x: its grad_x is weight invstd g alone (kernels.h), so a NaN or inf x,
// whose output a fused ReLU turned into 0, gets 0 as on the CPU and the cuDNN path, not
// (x - mean) * 0 = NaN.
template <class T, bool nhwc>
__global__ void grad_x_kernel(const T* x, const T* g, const T* relu_out, const float* mean, const float* coef,
                              bool training, T* grad_x, int64_t n, int64_t c, int64_t hw) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    int64_t ch = channel_of<nhwc>(i, c, hw);
    float d = masked_grad(g, relu_out, i);
    if (training) d = d - coef[3 * ch + 1] - (to_float(x[i]) - mean[ch]) * coef[3 * ch + 2];
    grad_x[i] = from_float<T>(coef[3 * ch] * d);
  }
}

// Calls f(T{}, std::bool_constant<nhwc>{}) for x's dtype and layout.
template <class F>
void dispatch(const Geometry& geo, const Tensor& x, F&& f) {
  dispatch_float(x.dtype(), "batch_norm2d",
                 [&](auto tag) { dispatch_bool(geo.nhwc, [&](auto nhwc) { f(tag, nhwc); }); });
}

template <Sums kind, class T>
void launch_partials(const T* x, const T* g, const T* relu_out, const float* mean, double* partial,
                     const Geometry& geo, cudaStream_t stream) {
  if (geo.nhwc) {
    dim3 grid(static_cast<unsigned>(geo.chunks),
              static_cast<unsigned>((geo.c + kChannelTile - 1) / kChannelTile));
    partials_nhwc<kind, T>
        <<<grid, dim3(kChannelTile, kRowsPerStep), 0, stream>>>(x, g, relu_out, mean, partial, geo);
  } else {
    dim3 grid(static_cast<unsigned>(geo.chunks), static_cast<unsigned>(geo.c));
    partials_nchw<kind, T><<<grid, kBlock, 0, stream>>>(x, g, relu_out, mean, partial, geo);
  }
  DPT_CUDA_LAUNCH_CHECK();
}

// Every activation-shaped tensor in x's layout and dtype; the channel tensors f32 [C].
void check(const Geometry& geo, const Tensor& x, std::initializer_list<const Tensor*> like_x,
           std::initializer_list<const Tensor*> channel) {
  for (const Tensor* t : like_x)
    DPT_CHECK(t->shape() == x.shape() && t->dtype() == x.dtype() && has_layout(*t, geo.nhwc))
        << "batch_norm2d on cuda: every activation tensor must have x's shape " << shape_str(x.shape())
        << ", dtype and layout";
  for (const Tensor* t : channel)
    if (t->defined())
      DPT_CHECK(t->dtype() == DType::f32 && t->is_contiguous() && t->numel() == geo.c)
          << "batch_norm2d on cuda: weight, bias and statistics must be contiguous f32 [" << geo.c << "]";
}

float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
template <class T>
T* elements_or_null(const Tensor& t) {
  return t.defined() ? elements<T>(t) : nullptr;
}

// The elementwise pass of a forward, from per-channel scale and shift, with the fused ReLU.
void normalize(const Geometry& geo, const Tensor& x, const float* scale, const float* shift, bool relu,
               const Tensor& out, cudaStream_t stream) {
  int64_t n = x.numel();
  dispatch(geo, x, [&](auto tag, auto nhwc) {
    using T = decltype(tag);
    normalize_kernel<T, decltype(nhwc)::value><<<grid_for(n), kBlock, 0, stream>>>(
        elements<T>(x), elements<T>(out), scale, shift, relu, n, geo.c, geo.hw);
  });
  DPT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void backward(const Tensor& x, const Tensor& grad_out, const Tensor& relu_out, const Tensor& weight,
              const Tensor& mean, const Tensor& invstd, const Tensor& var, float eps, bool training,
              const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
  Geometry geo = geometry_of(x);
  check(geo, x, {&grad_out, &grad_x}, {&weight, &mean, &invstd, &var, &grad_weight, &grad_bias});
  if (relu_out.defined()) check(geo, x, {&relu_out}, {});
  if (x.numel() == 0) return;
  int device = x.device().index;
  KernelScope scope(device);
  DeviceBuffer partial(sizeof(double) * 2 * geo.chunks * geo.c, device);
  DeviceBuffer coef(sizeof(float) * 3 * geo.c, device);
  dispatch(geo, x, [&](auto tag, auto) {
    using T = decltype(tag);
    launch_partials<Sums::grads, T>(elements<T>(x), elements<T>(grad_out), elements_or_null<T>(relu_out),
                                    mean.data<float>(), partial.as<double>(), geo, scope.stream());
  });
  finalize_grads<<<grid_for(geo.c), kBlock, 0, scope.stream()>>>(
      partial.as<double>(), geo, weight.data<float>(), data_or_null(invstd), data_or_null(var), eps, training,
      grad_weight.data<float>(), grad_bias.data<float>(), coef.as<float>());
  DPT_CUDA_LAUNCH_CHECK();
  int64_t n = x.numel();
  dispatch(geo, x, [&](auto tag, auto nhwc) {
    using T = decltype(tag);
    grad_x_kernel<T, decltype(nhwc)::value><<<grid_for(n), kBlock, 0, scope.stream()>>>(
        elements<T>(x), elements<T>(grad_out), elements_or_null<T>(relu_out), mean.data<float>(),
        coef.as<float>(), training, elements<T>(grad_x), n, geo.c, geo.hw);
  });
  DPT_CUDA_LAUNCH_CHECK();
}

void forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, float momentum, float eps, bool relu, const Tensor& out,
                      const Tensor& save_mean, const Tensor& save_invstd) {
  Geometry geo = geometry_of(x);
  check(geo, x, {&out}, {&weight, &bias, &running_mean, &running_var, &save_mean, &save_invstd});
  if (x.numel() == 0) return;
  int device = x.device().index;
  KernelScope scope(device);
  DeviceBuffer partial(sizeof(double) * 2 * geo.chunks * geo.c, device);
  DeviceBuffer coef(sizeof(float) * 2 * geo.c, device);  // scale, then shift
  dispatch(geo, x, [&](auto tag, auto) {
    using T = decltype(tag);
    launch_partials<Sums::stats, T>(elements<T>(x), nullptr, nullptr, nullptr, partial.as<double>(), geo,
                                    scope.stream());
  });
  finalize_stats<<<grid_for(geo.c), kBlock, 0, scope.stream()>>>(
      partial.as<double>(), geo, weight.data<float>(), bias.data<float>(), data_or_null(running_mean),
      data_or_null(running_var), momentum, eps, save_mean.data<float>(), save_invstd.data<float>(),
      coef.as<float>(), coef.as<float>() + geo.c);
  DPT_CUDA_LAUNCH_CHECK();
  normalize(geo, x, coef.as<float>(), coef.as<float>() + geo.c, relu, out, scope.stream());
}

void forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                       const Tensor& var, float eps, bool relu, const Tensor& out) {
  Geometry geo = geometry_of(x);
  check(geo, x, {&out}, {&weight, &bias, &mean, &var});
  if (x.numel() == 0) return;
  int device = x.device().index;
  KernelScope scope(device);
  DeviceBuffer coef(sizeof(float) * 2 * geo.c, device);
  eval_coefficients<<<grid_for(geo.c), kBlock, 0, scope.stream()>>>(
      weight.data<float>(), bias.data<float>(), mean.data<float>(), var.data<float>(), eps, coef.as<float>(),
      coef.as<float>() + geo.c, geo.c);
  DPT_CUDA_LAUNCH_CHECK();
  normalize(geo, x, coef.as<float>(), coef.as<float>() + geo.c, relu, out, scope.stream());
}

}  // namespace dpt::cuda::bn_kernels
