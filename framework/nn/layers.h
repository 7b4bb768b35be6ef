// The standard layers. Linear, Conv2d and BatchNorm2d can run with a ReLU fused into
// their kernel (Sequential does this when a ReLU follows them).
#pragma once

#include "core/rng.h"
#include "nn/module.h"
#include "ops/conv.h"
#include "ops/norm.h"
#include "ops/sync_batch_norm.h"

namespace dpt::nn {

// A layer whose kernel can apply ReLU to its own output: both forwards are run(x, relu),
// which runs the before_forward hook before it reads the parameters.
class ReluFusable : public Module {
 public:
  Tensor forward(const Tensor& x) override { return run(x, false); }
  Tensor forward_relu(const Tensor& x) { return run(x, true); }
  bool calls_before_forward() const override { return true; }

 protected:
  virtual Tensor run(const Tensor& x, bool relu) = 0;
};

// How a layer draws its weight (fan_in = in_channels/groups * kernel area; fan_out likewise).
enum class Init {
  kaiming_normal,   // N(0, sqrt(2 / fan_in)): the ReLU gain (He et al. 2015)
  kaiming_uniform,  // U(-b, b), b = sqrt(6 / fan_in)
  xavier_uniform,   // U(-b, b), b = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010)
  torch_default,    // U(-b, b), b = 1 / sqrt(fan_in): PyTorch's default, and every bias's
};

struct LinearOptions {};  // none: Linear and Conv2d are both made from (weight, bias, options)

class Linear : public ReluFusable {
 public:
  // Weight [out, in]; init torch_default is U(+-1/sqrt(in)) as PyTorch does.
  Linear(int64_t in, int64_t out, Rng& rng, bool bias = true, Init init = Init::torch_default);
  // With the given parameters: weight [out, in] and bias [out] or undefined (no bias), f32
  // CPU tensors it takes as they are (one rank's part of a wider layer, say).
  Linear(Tensor weight, Tensor bias, LinearOptions = {});
  std::string describe() const override;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  LinearOptions options() const { return {}; }

 protected:
  Tensor run(const Tensor& x, bool relu) override;

  Tensor weight_, bias_;
  WeightCache weight_cache_;  // the weight in the compute dtype, when that is not f32
};

class Conv2d : public ReluFusable {
 public:
  Conv2d(int64_t in, int64_t out, int64_t kernel, Rng& rng, Conv2dOptions options = {}, bool bias = true,
         Init init = Init::kaiming_normal);
  // With the given parameters: weight [out, in / groups, k, k] and bias [out] or undefined
  // (no bias), f32 CPU tensors it takes as they are.
  Conv2d(Tensor weight, Tensor bias, Conv2dOptions options);
  std::string describe() const override;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Conv2dOptions& options() const { return options_; }

 protected:
  Tensor run(const Tensor& x, bool relu) override;

  Tensor weight_, bias_;
  Conv2dOptions options_;
  WeightCache weight_cache_;  // the weight in the compute dtype and layout, when not f32 OIHW
};

class BatchNorm2d : public ReluFusable {
 public:
  explicit BatchNorm2d(int64_t channels, BatchNormOptions options = {});
  std::string describe() const override;
  // With a sum across ranks set, training uses synchronised batch statistics (DDP's
  // sync_bn); evaluation still uses the running statistics.
  void set_sum_across_ranks(SumAcrossRanks sum) { sum_across_ranks_ = std::move(sum); }

 protected:
  Tensor run(const Tensor& x, bool relu) override;

  Tensor weight_, bias_, running_mean_, running_var_;
  BatchNormOptions options_;
  SumAcrossRanks sum_across_ranks_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "ReLU"; }
};

// Max (Max = true) or average pooling over square windows (ops/pool.h).
template <bool Max>
class Pool2d : public Module {
 public:
  Pool2d(int64_t kernel, int64_t stride = -1, int64_t padding = 0)  // stride -1: = kernel
      : kernel_(kernel), stride_(stride < 0 ? kernel : stride), padding_(padding) {}
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  int64_t kernel_, stride_, padding_;
};
using MaxPool2d = Pool2d<true>;
using AvgPool2d = Pool2d<false>;

class GlobalAvgPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override;  // [N, C, H, W] -> [N, C]
  std::string describe() const override { return "GlobalAvgPool2d"; }
};

class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "Flatten"; }
};

class Dropout : public Module {
 public:
  // The mask generator is seeded here; each rank may pass its own seed.
  Dropout(float p, uint64_t seed);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  Rng& rng() { return rng_; }  // its state goes into checkpoints

 private:
  float p_;
  Rng rng_;
};

}  // namespace dpt::nn
