#include "nn/layers.h"

#include <cmath>

#include "ops/activation.h"
#include "ops/cast.h"
#include "ops/dropout.h"
#include "ops/linear.h"
#include "ops/pool.h"
#include "ops/shape.h"

namespace dpt::nn {
namespace {

// w drawn by `init` (layers.h), in place.
void init_weight(const Tensor& w, Init init, int64_t fan_in, int64_t fan_out, Rng& rng) {
  if (init == Init::kaiming_normal)
    return rng.fill_normal(w, 0.0f, static_cast<float>(std::sqrt(2.0 / fan_in)));
  double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));  // torch_default
  if (init == Init::kaiming_uniform) bound = std::sqrt(6.0 / fan_in);
  if (init == Init::xavier_uniform) bound = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  rng.fill_uniform(w, -static_cast<float>(bound), static_cast<float>(bound));
}

}  // namespace

Linear::Linear(int64_t in, int64_t out, Rng& rng, bool bias, Init init) {
  DPT_CHECK(in > 0 && out > 0) << "Linear: sizes must be positive, got " << in << " -> " << out;
  weight_ = register_parameter("weight", Tensor::empty({out, in}));
  init_weight(weight_, init, in, out, rng);
  if (bias) {
    bias_ = register_parameter("bias", Tensor::empty({out}));
    init_weight(bias_, Init::torch_default, in, out, rng);
  }
}

Linear::Linear(Tensor weight, Tensor bias, LinearOptions) {
  DPT_CHECK(weight.dim() == 2 && (!bias.defined() || bias.shape() == Shape{weight.size(0)}))
      << "Linear: expected weight [out, in] and bias [out], got " << shape_str(weight.shape())
      << (bias.defined() ? " and " + shape_str(bias.shape()) : "");
  weight_ = register_parameter("weight", std::move(weight));
  if (bias.defined()) bias_ = register_parameter("bias", std::move(bias));
}

// In bf16 the input is cast (a no-op when the layer before already ran in bf16) and the
// weight comes from the cache; the bias stays f32 (the kernels add it in f32).
Tensor Linear::run(const Tensor& x, bool relu) {
  before_forward();
  const Compute& c = compute();
  if (c.dtype == DType::f32) return linear(x, weight_, bias_, relu);
  return linear(cast(x, c.dtype), weight_cache_.get(weight_, c), bias_, relu);
}

std::string Linear::describe() const {
  return "Linear(" + std::to_string(weight_.size(1)) + ", " + std::to_string(weight_.size(0)) + ")";
}

Conv2d::Conv2d(int64_t in, int64_t out, int64_t kernel, Rng& rng, Conv2dOptions options, bool bias, Init init)
    : options_(options) {
  DPT_CHECK(in > 0 && out > 0 && kernel > 0) << "Conv2d: sizes must be positive";
  DPT_CHECK(options.groups > 0 && in % options.groups == 0 && out % options.groups == 0)
      << "Conv2d: channels " << in << " -> " << out << " do not divide into " << options.groups << " groups";
  weight_ = register_parameter("weight", Tensor::empty({out, in / options.groups, kernel, kernel}));
  int64_t fan_in = in / options.groups * kernel * kernel;
  init_weight(weight_, init, fan_in, out / options.groups * kernel * kernel, rng);
  if (bias) {
    bias_ = register_parameter("bias", Tensor::empty({out}));
    init_weight(bias_, Init::torch_default, fan_in, out, rng);
  }
}

Conv2d::Conv2d(Tensor weight, Tensor bias, Conv2dOptions options) : options_(options) {
  DPT_CHECK(weight.dim() == 4 && (!bias.defined() || bias.shape() == Shape{weight.size(0)}))
      << "Conv2d: expected weight [out, in / groups, k, k] and bias [out], got " << shape_str(weight.shape())
      << (bias.defined() ? " and " + shape_str(bias.shape()) : "");
  weight_ = register_parameter("weight", std::move(weight));
  if (bias.defined()) bias_ = register_parameter("bias", std::move(bias));
}

// The network's input is cast to the compute dtype and layout here, at its first
// convolution, in one pass; later layers' inputs already are, and pass through.
Tensor Conv2d::run(const Tensor& x, bool relu) {
  before_forward();
  const Compute& c = compute();
  if (!c.active()) return conv2d(x, weight_, bias_, options_, relu);
  Conv2dOptions options = options_;
  options.channels_last = c.channels_last;
  Tensor input = cast(x, c.dtype, c.channels_last ? MemoryFormat::channels_last : MemoryFormat::preserve);
  return conv2d(input, weight_cache_.get(weight_, c), bias_, options, relu);
}

std::string Conv2d::describe() const {
  return "Conv2d(" + std::to_string(weight_.size(1) * options_.groups) + ", " + std::to_string(weight_.size(0)) +
         ", kernel " + std::to_string(weight_.size(2)) + ", stride " + std::to_string(options_.stride) +
         ", padding " + std::to_string(options_.padding) +
         (options_.groups > 1 ? ", groups " + std::to_string(options_.groups) : "") + ")";
}

BatchNorm2d::BatchNorm2d(int64_t channels, BatchNormOptions options) : options_(options) {
  weight_ = register_parameter("weight", Tensor::full({channels}, 1.0f));
  bias_ = register_parameter("bias", Tensor::zeros({channels}));
  running_mean_ = register_buffer("running_mean", Tensor::zeros({channels}));
  running_var_ = register_buffer("running_var", Tensor::full({channels}, 1.0f));
}

Tensor BatchNorm2d::run(const Tensor& x, bool relu) {
  before_forward();
  if (is_training() && sum_across_ranks_) {
    Tensor y = sync_batch_norm2d(x, weight_, bias_, running_mean_, running_var_, options_, sum_across_ranks_);
    return relu ? dpt::relu(y) : y;
  }
  return batch_norm2d(x, weight_, bias_, running_mean_, running_var_, is_training(), options_, relu);
}

std::string BatchNorm2d::describe() const { return "BatchNorm2d(" + std::to_string(weight_.size(0)) + ")"; }

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

template <bool Max>
Tensor Pool2d<Max>::forward(const Tensor& x) {
  return (Max ? max_pool2d : avg_pool2d)(x, kernel_, stride_, padding_);
}

template <bool Max>
std::string Pool2d<Max>::describe() const {
  return std::string(Max ? "MaxPool2d" : "AvgPool2d") + "(kernel " + std::to_string(kernel_) + ", stride " +
         std::to_string(stride_) + ", padding " + std::to_string(padding_) + ")";
}

template class Pool2d<true>;
template class Pool2d<false>;

Tensor GlobalAvgPool2d::forward(const Tensor& x) { return global_avg_pool2d(x); }

Tensor Flatten::forward(const Tensor& x) { return flatten(x, 1); }

Dropout::Dropout(float p, uint64_t seed) : p_(p), rng_(seed) {
  DPT_CHECK(p >= 0.0f && p < 1.0f) << "Dropout: p must be in [0, 1), got " << p;
}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training(), rng_); }
std::string Dropout::describe() const { return "Dropout(" + std::to_string(p_) + ")"; }

}  // namespace dpt::nn
