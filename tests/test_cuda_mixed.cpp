// Mixed precision and channels-last on CUDA against the CPU's f32: every kernel that takes
// bf16 or NHWC (cast, elementwise, ReLU, conv with and without bias and fused ReLU, batch
// norm in training and eval, sync batch norm, max/avg/global pooling, shortcut_pad,
// linear) run in three modes — f32 NHWC, bf16 NCHW, bf16 NHWC — with outputs and input
// gradients compared to the CPU twin; then a ResNet-20 and an mnist_cnn training step with
// precision bf16 (and channels-last) against the same model in f32 on the CPU. Batch norm
// with a fused ReLU is also checked against relu(batch_norm) on the GPU (bit for bit) and
// by the kernels a captured forward and backward holds (the fused ReLU adds none on the
// bf16 / NHWC kernels). Skipped without a GPU.
//
// Tolerances. Op by op, the CPU reads the inputs (and the upstream gradient) rounded to
// bf16, exactly what the GPU reads, so what is left is each op's own rounding of its
// bf16 output (2^-9 relative) and f32 summation order: tolerance_for(bf16) = 1e-2 + 1.6e-2
// |ref|. Whole models: ~20 layers each add a rounding forward and backward, and batch norm
// divides by per-channel spreads; elementwise bounds would fail on the smallest gradient
// elements, so each gradient tensor is compared by its relative L2 error, and the loss within
// 2%. The bound is not a sum of roundings: bf16 moves ReLU and max-pool inputs across their
// kinks, which reroutes gradients. tools/research/bf16_step_error.py emulates these steps (PyTorch,
// 8 seeds): worst tensor 0.116 for mnist_cnn (its first conv: max-pool ties), 0.515 for
// ResNet-20 (median tensor ~0.23); bounds 0.25 and 0.8 leave ~1.6x. A wrong kernel gives
// >= 1 (zero, uncorrelated or sign-flipped gradients); scale errors are the op tests' job.
#include <gtest/gtest.h>

#include "cuda_compare.h"

#ifndef DPT_WITH_CUDA

TEST(CudaMixed, GpuTests) { GTEST_SKIP() << dpt::testing::kNoCudaBackend; }

#else

#include <cmath>

#include "autograd/node.h"
#include "backend/cuda/graph.h"
#include "graph_nodes.h"
#include "inputs.h"
#include "models/registry.h"
#include "ops/activation.h"
#include "ops/cast.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/shape.h"
#include "ops/shortcut_pad.h"
#include "ops/sync_batch_norm.h"
#include "optim/sgd.h"

using namespace dpt;
using dpt::testing::distinct_tensor;
using dpt::testing::expect_tensors_close;
using dpt::testing::kink_free_input;
using dpt::testing::odd_32nds;
using dpt::testing::quarter_steps;
using dpt::testing::random_labels;
using dpt::testing::random_leaf;
using dpt::testing::random_tensor;
using dpt::testing::relative_l2;
using dpt::testing::Tolerance;
using dpt::testing::tolerance_for;

namespace {

using CudaMixed = dpt::testing::CudaTest;
using Inputs = std::vector<Tensor>;

struct Mode {
  DType dtype;
  bool nhwc;
  std::string str() const { return std::string(dtype_name(dtype)) + (nhwc ? " NHWC" : " NCHW"); }
};
const std::vector<Mode> kModes = {{DType::f32, true}, {DType::bf16, false}, {DType::bf16, true}};

// How an input enters the op on CUDA: an activation in the mode's dtype and layout, a
// weight in the mode's dtype (the ops convert the layout themselves), or as it is (f32
// bias and batch-norm parameters, i64 labels).
enum class Role { activation, weight, as_is };

// Values as bf16 holds them: the CPU reference then reads what the GPU reads. Always a
// leaf of its own: several ops' checks share inputs, and the shared leaf's .grad would
// sum their gradients.
Tensor rounded(const Tensor& t, DType dtype) {
  if (dtype != DType::bf16 || t.dtype() != DType::f32) {
    Tensor out = t.detach();
    if (t.requires_grad()) out.set_requires_grad(true);
    return out;
  }
  std::vector<float> v = t.to_vector();
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));
  Tensor out = Tensor::from_vector(v, t.shape());
  if (t.requires_grad()) out.set_requires_grad(true);
  return out;
}

Tensor to_mode(const Tensor& t, Role role, const Mode& m) {
  if (role == Role::as_is) return t;
  MemoryFormat format = role == Role::activation && m.nhwc && t.dim() == 4 ? MemoryFormat::channels_last
                                                                           : MemoryFormat::preserve;
  return cast(t, m.dtype, format);
}

// f on CPU f32 copies of `inputs` (rounded to the mode's dtype) and on cuda:0 f32 leaves of
// the same values, cast per `roles` inside the recorded graph; the outputs compared, then
// the f32 gradients of every leaf that requires one, from one upstream gradient.
void expect_mode_matches_cpu(const std::string& what, const Mode& m, const dpt::testing::OpFn& f,
                             const Inputs& inputs, const std::vector<Role>& roles,
                             Tolerance tol = tolerance_for(DType::bf16)) {
  SCOPED_TRACE(what + " in " + m.str());
  Inputs cpu, gpu, gpu_in;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor r = rounded(inputs[k], m.dtype);
    cpu.push_back(r);
    Tensor leaf = r.detach().to(Device::cuda(0));
    if (r.requires_grad()) leaf.set_requires_grad(true);
    gpu.push_back(leaf);
    gpu_in.push_back(to_mode(leaf, roles[k], m));
  }
  Tensor out_cpu = f(cpu), out_gpu = f(gpu_in);
  ASSERT_TRUE(out_gpu.device() == Device::cuda(0));
  EXPECT_EQ(out_gpu.dtype(), m.dtype) << "the output keeps the compute dtype";
  if (out_gpu.dim() == 4 && m.nhwc) {
    EXPECT_TRUE(out_gpu.is_channels_last()) << "the output keeps NHWC";
  }
  expect_tensors_close(out_gpu, out_cpu, what + " output", tol);
  if (!out_cpu.requires_grad()) return;
  Tensor upstream = rounded(random_tensor(out_cpu.shape(), 99), m.dtype);
  out_cpu.backward(upstream);
  MemoryFormat format = out_gpu.dim() == 4 && m.nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  out_gpu.backward(cast(upstream.to(Device::cuda(0)), m.dtype, format));
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].requires_grad()) continue;
    const Tensor& g = gpu[k].grad();
    ASSERT_TRUE(g.defined()) << what << ": input " << k << " got no gradient";
    EXPECT_EQ(g.dtype(), DType::f32) << "an f32 leaf gets an f32 gradient";
    expect_tensors_close(g, cpu[k].grad(), what + " gradient of input " + std::to_string(k), tol);
  }
}

// Distinct values k/64 with |k| < 256: exact in bf16 (8 significant bits), so pooling's
// maxima are the same elements on both sides.
Tensor exact_distinct(const Shape& shape, uint64_t seed) {
  return distinct_tensor(shape, seed, 1.0f / 64).set_requires_grad(true);
}

}  // namespace

TEST_F(CudaMixed, CastRoundsToNearestEvenAndChangesLayout) {
  // 1 + 2^-8 is halfway between two bf16 values: ties go to the even one (1.0); 1 + 3 * 2^-8
  // rounds up to 1 + 2^-6.
  Tensor x = Tensor::from_vector(std::vector<float>{1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, 0.0f}, {4});
  Tensor y = cast(x.to(gpu), DType::bf16);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1.0f, 1.0f + 1.0f / 64, -2.5f, 0.0f}));
  // NCHW -> NHWC: the same values, and the bytes where NHWC puts them.
  Tensor a = random_tensor({2, 3, 4, 5}, 1);
  Tensor nhwc = cast(a.to(gpu), DType::f32, MemoryFormat::channels_last);
  EXPECT_TRUE(nhwc.is_channels_last());
  EXPECT_EQ(nhwc.to_vector(), a.to_vector());  // to_vector reads in row-major order
  Tensor bytes = nhwc.as_strided({a.numel()}, {1}, nhwc.offset());
  EXPECT_EQ(bytes.to_vector(), a.channels_last().as_strided({a.numel()}, {1}, 0).to_vector());
}

TEST_F(CudaMixed, ElementwiseAndRelu) {
  for (const Mode& m : kModes) {
    Inputs ab = {random_leaf({2, 6, 5, 5}, 3), random_leaf({2, 6, 5, 5}, 4)};
    std::vector<Role> two = {Role::activation, Role::activation};
    expect_mode_matches_cpu(
        "add", m, [](const Inputs& t) { return add(t[0], t[1]); }, ab, two);
    expect_mode_matches_cpu(
        "mul", m, [](const Inputs& t) { return mul(t[0], t[1]); }, ab, two);
    expect_mode_matches_cpu("relu", m, [](const Inputs& t) { return relu(t[0]); },
                            {dpt::testing::away_from_zero({2, 6, 5, 5}, 5).set_requires_grad(true)},
                            {Role::activation});
    // Two gradients into one tensor (a ResNet block's input feeds the branch and the shortcut).
    expect_mode_matches_cpu("relu(x) + x", m, [](const Inputs& t) { return add(relu(t[0]), t[0]); },
                            {dpt::testing::away_from_zero({2, 6, 5, 5}, 6).set_requires_grad(true)},
                            {Role::activation});
    // The fused end of a BasicBlock: sums away from 0, where bf16 rounding of the inputs
    // cannot move one across the kink; then with branch and shortcut from one tensor.
    auto [a, b] = dpt::testing::add_relu_away_from_zero({2, 6, 5, 5}, 8);
    expect_mode_matches_cpu(
        "add_relu", m, [](const Inputs& t) { return add_relu(t[0], t[1]); }, {a, b}, two);
    expect_mode_matches_cpu(
        "add_relu(relu(x), x)", m, [](const Inputs& t) { return add_relu(relu(t[0]), t[0]); },
        {dpt::testing::away_from_zero({2, 6, 5, 5}, 10).set_requires_grad(true)}, {Role::activation});
    Tensor fused = add_relu(to_mode(a.detach().to(gpu).set_requires_grad(true), Role::activation, m),
                            to_mode(b.detach().to(gpu), Role::activation, m));
    EXPECT_EQ(fused.grad_fn()->name, "add_relu") << "one layout and dtype: the fused kernel ran";
  }
  // Past one grid of 4096 x 256 threads.
  Tensor big = dpt::testing::away_from_zero({(1 << 22) + 5}, 7).set_requires_grad(true);
  expect_mode_matches_cpu("relu, 2^22 + 5 elements", {DType::bf16, false},
                          [](const Inputs& t) { return relu(t[0]); }, {big}, {Role::activation});
  auto [big_a, big_b] = dpt::testing::add_relu_away_from_zero({(1 << 22) + 5}, 11);
  expect_mode_matches_cpu("add_relu, 2^22 + 5 elements", {DType::bf16, false},
                          [](const Inputs& t) { return add_relu(t[0], t[1]); }, {big_a, big_b},
                          {Role::activation, Role::activation});
}

TEST_F(CudaMixed, Conv2dWithAndWithoutBiasAndRelu) {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
    bool bias, relu;
  };
  std::vector<Case> cases = {
      {{4, 3, 8, 8}, {16, 3, 3, 3}, {.padding = 1}, false, false},                 // a ResNet stem
      {{2, 16, 8, 8}, {32, 16, 3, 3}, {.stride = 2, .padding = 1}, false, false},  // a stage's first conv
      {{2, 16, 8, 8}, {32, 16, 1, 1}, {.stride = 2}, false, false},                // option B projection
      {{4, 1, 28, 28}, {32, 1, 3, 3}, {.padding = 1}, true, true},                 // mnist_cnn's first layer
      {{2, 8, 7, 7}, {8, 1, 3, 3}, {.padding = 1, .groups = 8}, true, false},      // depthwise
  };
  uint64_t seed = 20;
  for (const Mode& m : kModes)
    for (const Case& k : cases) {
      // The fused ReLU case: with uniform inputs the GPU's bf16-rounded conv plus the f32 bias
      // has the other sign than the CPU's f32 pre-activation at 34 (bf16 NCHW, seeds 45-47) and
      // 18 (bf16 NHWC) outputs, each moving gradients by |upstream * w|; quarter_steps /
      // odd_32nds make every pre-activation exact in bf16 and 1/32 away from 0.
      Tensor x = k.relu ? quarter_steps(k.x, ++seed) : random_leaf(k.x, ++seed);
      Tensor w = k.relu ? quarter_steps(k.w, ++seed) : random_leaf(k.w, ++seed);
      Tensor b = k.relu ? odd_32nds({k.w[0]}, ++seed) : random_leaf({k.w[0]}, ++seed);
      Conv2dOptions o = k.o;
      o.channels_last = m.nhwc;  // as nn::Conv2d sets it: NHWC even for a 1-channel input
      bool fused = k.relu;
      Inputs in = k.bias ? Inputs{x, w, b} : Inputs{x, w};
      std::vector<Role> roles = {Role::activation, Role::weight, Role::as_is};
      roles.resize(in.size());
      expect_mode_matches_cpu(
          "conv2d " + shape_str(k.x) + " * " + shape_str(k.w), m,
          [o, fused](const Inputs& t) {
            return conv2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), o, fused);
          },
          in, roles);
    }
}

TEST_F(CudaMixed, BatchNormTrainingAndEval) {
  for (const Mode& m : kModes)
    for (bool fused : {false, true}) {
      Tensor x = kink_free_input({8, 6, 5, 5}, 30).set_requires_grad(true);
      Tensor w = random_leaf({6}, 31, 0.5f, 1.5f), b = Tensor::zeros({6}).set_requires_grad(true);
      Tensor rm_cpu = random_tensor({6}, 32), rv_cpu = random_tensor({6}, 33, 0.5f, 1.5f);
      Tensor rm_gpu = rm_cpu.to(gpu), rv_gpu = rv_cpu.to(gpu);
      std::vector<Role> roles = {Role::activation, Role::as_is, Role::as_is};
      auto bn = [&](bool training) {
        return [&, training](const Inputs& t) {
          bool on_gpu = t[0].device().is_cuda();
          return batch_norm2d(t[0], t[1], t[2], on_gpu ? rm_gpu : rm_cpu, on_gpu ? rv_gpu : rv_cpu, training,
                              {.momentum = 0.2f}, fused);
        };
      };
      expect_mode_matches_cpu(std::string("batch_norm2d training") + (fused ? " + relu" : ""), m, bn(true),
                              {x, w, b}, roles);
      // The statistics are f32 from bf16 inputs: f32 accuracy on the values both sides read.
      expect_tensors_close(rm_gpu, rm_cpu, "running_mean", {1e-5, 1e-4});
      expect_tensors_close(rv_gpu, rv_cpu, "running_var", {1e-5, 1e-4});
      expect_mode_matches_cpu(std::string("batch_norm2d eval") + (fused ? " + relu" : ""), m, bn(false),
                              {x, w, b}, roles);
    }
  // Many rows per channel: several chunks per channel in the two-stage sums.
  for (const Mode& m : kModes)
    expect_mode_matches_cpu(
        "batch_norm2d, 64 x 16 x 32 x 32", m,
        [](const Inputs& t) { return batch_norm2d(t[0], t[1], t[2], Tensor(), Tensor(), true); },
        {random_leaf({64, 16, 32, 32}, 34, -1.0f, 3.0f), random_leaf({16}, 35), random_leaf({16}, 36)},
        {Role::activation, Role::as_is, Role::as_is});
}

namespace {

// Batch norm + ReLU inputs whose normalised values straddle 0, so the ReLU's mask matters,
// with no output near the kink: x from kink_free_input (per channel |x - mean| spans 0.57 to
// 1.36 standard deviations in 8 levels) and bias = k weight with k cycling through
// {0.75, -0.75, -3, 3} over the channels: the kink at xhat = -k falls between two levels
// (0.68 and 0.80) or outside them all, so a channel has 3/8, 5/8, all or none of its
// outputs masked, and no |output| below 0.02 before the ReLU. Eval takes running mean 0 and
// variance 0.775 (the batch's), so the same levels.
// Shape [16, 40, 12, 12]: 2304 values per channel (three chunks in the two-stage sums) and
// 40 channels (a partial 32-channel tile in NHWC).
struct FusedReluCase {
  Tensor x, weight, bias, running_mean, running_var;
};

FusedReluCase fused_relu_case() {
  const int64_t c = 40;
  FusedReluCase k;
  k.x = kink_free_input({16, c, 12, 12}, 70).set_requires_grad(true);
  k.weight = random_tensor({c}, 71, 0.5f, 1.5f);
  std::vector<float> w = k.weight.to_vector(), b(c);
  const float shift[4] = {0.75f, -0.75f, -3.0f, 3.0f};
  for (int64_t i = 0; i < c; ++i) b[i] = shift[i % 4] * w[i];
  k.weight.set_requires_grad(true);
  k.bias = Tensor::from_vector(b, {c}).set_requires_grad(true);
  k.running_mean = Tensor::zeros({c});
  k.running_var = Tensor::full({c}, 0.775f);
  return k;
}

// Bit for bit, a NaN matching a NaN.
void expect_same_values(const Tensor& got, const Tensor& want, const std::string& what) {
  std::vector<float> a = got.to_vector(), b = want.to_vector();
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) {
      ADD_FAILURE() << what << " differs at " << i << ": " << a[i] << " vs " << b[i];
      return;
    }
}

}  // namespace

TEST_F(CudaMixed, BatchNormFusedReluMatchesCpu) {
  FusedReluCase k = fused_relu_case();
  {  // The inputs do what fused_relu_case says: the mask is partial, full or empty by channel.
    std::vector<float> out =
        batch_norm2d(k.x.detach(), k.weight.detach(), k.bias.detach(), Tensor(), Tensor(), true, {}, true)
            .to_vector();
    const int64_t c = 40, hw = 144, n = 16;
    for (int64_t ch = 0; ch < c; ++ch) {
      int64_t zeros = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < hw; ++j) zeros += out[(i * c + ch) * hw + j] == 0.0f ? 1 : 0;
      const int64_t all = n * hw;
      const int64_t want[4][2] = {{all / 5, all / 2}, {all / 2, all * 3 / 4}, {all, all}, {0, 0}};
      EXPECT_GE(zeros, want[ch % 4][0]) << "channel " << ch;
      EXPECT_LE(zeros, want[ch % 4][1]) << "channel " << ch;
    }
  }
  Tensor rm_gpu = k.running_mean.to(gpu), rv_gpu = k.running_var.to(gpu);
  std::vector<Role> roles = {Role::activation, Role::as_is, Role::as_is};
  for (const Mode& m : kModes)
    for (bool training : {true, false})
      expect_mode_matches_cpu(
          std::string("batch_norm2d + fused relu, ") + (training ? "training" : "eval"), m,
          [&, training](const Inputs& t) {
            bool on_gpu = t[0].device().is_cuda();
            Tensor rm = training ? Tensor() : on_gpu ? rm_gpu : k.running_mean;
            Tensor rv = training ? Tensor() : on_gpu ? rv_gpu : k.running_var;
            return batch_norm2d(t[0], t[1], t[2], rm, rv, training, {}, true);
          },
          {k.x, k.weight, k.bias}, roles);
}

// Where the ReLU runs is the backend's choice, not a change of result: fused or after the
// op, the GPU gives the same bits (output, running statistics, three gradients) on its own
// kernels (fixed-order sums) and in eval on cuDNN (f32 NCHW); cuDNN's training calls run
// twice are compared within the f32 tolerance (cuDNN promises equal bits for "most" of its
// routines and names no batch-norm exception; a mask error is far above it). In eval a NaN
// input becomes 0 as relu_forward makes it, and its gradient 0.
TEST_F(CudaMixed, BatchNormFusedReluIsReluOfBatchNormBitForBit) {
  FusedReluCase k = fused_relu_case();
  Tensor upstream = random_tensor(k.x.shape(), 72);
  std::vector<Mode> modes = kModes;
  modes.push_back({DType::f32, false});
  for (const Mode& m : modes)
    for (bool training : {true, false}) {
      SCOPED_TRACE(m.str() + (training ? " training" : " eval"));
      Tensor x = k.x.detach().clone();
      // Eval only: in training one NaN makes its channel's batch statistics NaN.
      if (!training) x.data<float>()[5] = std::nanf("");
      struct Run {
        Tensor out, x, weight, bias, running_mean, running_var;
      };
      auto run = [&](bool fused) {
        Run r;
        r.x = x.to(gpu);
        r.weight = k.weight.detach().to(gpu);
        r.bias = k.bias.detach().to(gpu);
        r.running_mean = k.running_mean.to(gpu);
        r.running_var = k.running_var.to(gpu);
        for (Tensor* leaf : {&r.x, &r.weight, &r.bias}) leaf->set_requires_grad(true);
        Tensor y = batch_norm2d(to_mode(r.x, Role::activation, m), r.weight, r.bias, r.running_mean,
                                r.running_var, training, {.momentum = 0.2f}, fused);
        r.out = fused ? y : relu(y);
        MemoryFormat format = m.nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
        r.out.backward(cast(upstream.to(gpu), m.dtype, format));
        return r;
      };
      Run fused = run(true), apart = run(false);
      bool cudnn_sums = training && m.dtype == DType::f32 && !m.nhwc;
      auto expect_same = [&](const Tensor& got, const Tensor& want, const std::string& what) {
        if (cudnn_sums)
          expect_tensors_close(got, want, what, tolerance_for(DType::f32));
        else
          expect_same_values(got, want, what);
      };
      expect_same(fused.out, apart.out, "output");
      if (!training) {
        EXPECT_EQ(fused.out.to_vector()[5], 0.0f) << "relu(NaN)";
        EXPECT_EQ(fused.x.grad().to_vector()[5], 0.0f) << "the gradient at relu(NaN)";
      }
      expect_same(fused.running_mean, apart.running_mean, "running_mean");
      expect_same(fused.running_var, apart.running_var, "running_var");
      expect_same(fused.x.grad(), apart.x.grad(), "gradient of x");
      expect_same(fused.weight.grad(), apart.weight.grad(), "gradient of weight");
      expect_same(fused.bias.grad(), apart.bias.grad(), "gradient of bias");
    }
}

// The saving, counted: a captured forward + backward of batch_norm2d holds as many kernels
// with the fused ReLU as without it on the bf16 / NHWC kernels, while relu(batch_norm2d)
// holds more (its forward and backward passes); the cuDNN path still runs the ReLU apart.
TEST_F(CudaMixed, BatchNormFusedReluAddsNoKernelToACapturedStep) {
  cuda::allocator_set_poison(false);  // its memsets are graph nodes too; count the work alone
  FusedReluCase k = fused_relu_case();
  Tensor upstream = random_tensor(k.x.shape(), 73);
  std::vector<Mode> modes = kModes;
  modes.push_back({DType::f32, false});
  enum class Relu { none, fused, apart };
  for (const Mode& m : modes) {
    SCOPED_TRACE(m.str());
    MemoryFormat format = m.nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
    Tensor up = cast(upstream.to(gpu), m.dtype, format);
    auto nodes = [&](Relu relu_at) {
      Tensor x = k.x.detach().to(gpu), w = k.weight.detach().to(gpu), b = k.bias.detach().to(gpu);
      for (Tensor* leaf : {&x, &w, &b}) leaf->set_requires_grad(true);
      auto step = [&] {
        Tensor y = batch_norm2d(to_mode(x, Role::activation, m), w, b, Tensor(), Tensor(), true, {},
                                relu_at == Relu::fused);
        (relu_at == Relu::apart ? relu(y) : y).backward(up);
      };
      step();  // eager first: library handles are made outside the capture
      cuda::Graph graph(0);
      graph.capture(step);
      return graph.node_count();
    };
    size_t none = nodes(Relu::none), fused = nodes(Relu::fused), apart = nodes(Relu::apart);
    EXPECT_GT(apart, none) << "a ReLU op adds its forward and backward kernels";
    if (m.dtype == DType::f32 && !m.nhwc) {
      EXPECT_GT(fused, none) << "cuDNN's batch norm runs the ReLU as separate kernels";
    } else {
      EXPECT_EQ(fused, none) << "the fused ReLU runs inside the batch-norm kernels";
    }
  }
}

// sync_bn: true with precision: bf16 or channels_last: true hands sync_batch_norm2d the
// convolutions' bf16 / NHWC activations; it returns its output in their dtype and layout,
// with the statistics in f32 as on the CPU (one rank: the cross-rank sum changes nothing).
TEST_F(CudaMixed, SyncBatchNormTakesBf16AndNhwc) {
  for (const Mode& m : kModes) {
    Tensor x = kink_free_input({8, 6, 5, 5}, 40).set_requires_grad(true);
    Tensor w = random_leaf({6}, 41, 0.5f, 1.5f), b = random_leaf({6}, 42);
    Tensor rm_cpu = random_tensor({6}, 43), rv_cpu = random_tensor({6}, 44, 0.5f, 1.5f);
    Tensor rm_gpu = rm_cpu.to(gpu), rv_gpu = rv_cpu.to(gpu);
    int gpu_sums = 0;
    auto sync_bn = [&](const Inputs& t) {
      const bool on_gpu = t[0].device().is_cuda();
      SumAcrossRanks one_rank = [&gpu_sums, on_gpu](const Tensor&) { gpu_sums += on_gpu ? 1 : 0; };
      return sync_batch_norm2d(t[0], t[1], t[2], on_gpu ? rm_gpu : rm_cpu, on_gpu ? rv_gpu : rv_cpu,
                               {.momentum = 0.2f}, one_rank);
    };
    expect_mode_matches_cpu("sync_batch_norm2d", m, sync_bn, {x, w, b},
                            {Role::activation, Role::as_is, Role::as_is});
    EXPECT_EQ(gpu_sums, 3) << m.str() << ": two sums forward, one backward";
    expect_tensors_close(rm_gpu, rm_cpu, "running_mean", {1e-5, 1e-4});
    expect_tensors_close(rv_gpu, rv_cpu, "running_var", {1e-5, 1e-4});
  }
}

TEST_F(CudaMixed, PoolingAndShortcutPad) {
  for (const Mode& m : kModes) {
    for (auto [kernel, stride, padding] : {std::tuple{2, 2, 0}, std::tuple{3, 2, 1}, std::tuple{3, 1, 1}}) {
      std::string shape =
          " k" + std::to_string(kernel) + " s" + std::to_string(stride) + " p" + std::to_string(padding);
      int64_t k = kernel, s = stride, p = padding;
      expect_mode_matches_cpu("max_pool2d" + shape, m,
                              [=](const Inputs& t) { return max_pool2d(t[0], k, s, p); },
                              {exact_distinct({2, 3, 9, 7}, 40)}, {Role::activation});
      expect_mode_matches_cpu("avg_pool2d" + shape, m,
                              [=](const Inputs& t) { return avg_pool2d(t[0], k, s, p); },
                              {random_leaf({2, 3, 9, 7}, 41)}, {Role::activation});
    }
    expect_mode_matches_cpu("global_avg_pool2d", m, [](const Inputs& t) { return global_avg_pool2d(t[0]); },
                            {random_leaf({3, 64, 8, 8}, 42)}, {Role::activation});
    expect_mode_matches_cpu("shortcut_pad", m, [](const Inputs& t) { return shortcut_pad(t[0], 32, 2); },
                            {random_leaf({2, 16, 8, 8}, 43)}, {Role::activation});
    expect_mode_matches_cpu("shortcut_pad, odd size", m,
                            [](const Inputs& t) { return shortcut_pad(t[0], 5, 2); },
                            {random_leaf({1, 3, 7, 5}, 44)}, {Role::activation});
    // mnist_cnn's flatten of an NHWC map: the features in NCHW order, as the CPU has them.
    expect_mode_matches_cpu("flatten", m, [](const Inputs& t) { return flatten(t[0]); },
                            {random_leaf({2, 4, 3, 3}, 45)}, {Role::activation});
  }
}

TEST_F(CudaMixed, LinearAndLossOfBf16Logits) {
  Mode bf16{DType::bf16, false};
  Inputs in = {random_leaf({9, 40}, 50), random_leaf({7, 40}, 51), random_leaf({7}, 52)};
  std::vector<Role> roles = {Role::activation, Role::weight, Role::as_is};
  expect_mode_matches_cpu(
      "linear", bf16, [](const Inputs& t) { return linear(t[0], t[1], t[2]); }, in, roles);
  // Smallest |pre-activation| 0.16, 135 times the bf16 rounding (2^-9 |x w|) the GPU adds
  // before the bias: no mask can differ from the CPU's.
  expect_mode_matches_cpu(
      "linear + relu", bf16, [](const Inputs& t) { return linear(t[0], t[1], t[2], true); },
      {random_leaf({9, 40}, 53, 0.2f, 1.0f), random_leaf({7, 40}, 54), random_leaf({7}, 55)}, roles);
  // The loss is f32 whatever the logits: its value to f32 accuracy on the values read.
  Tensor logits = random_leaf({16, 10}, 56, -3.0f, 3.0f), labels = random_labels(16, 10, 57);
  Tensor r = rounded(logits, DType::bf16);
  Tensor loss_cpu = cross_entropy(r, labels, 0.1f);
  Tensor leaf = r.detach().to(gpu).set_requires_grad(true);
  Tensor loss_gpu = cross_entropy(cast(leaf, DType::bf16), labels.to(gpu), 0.1f);
  EXPECT_EQ(loss_gpu.dtype(), DType::f32);
  EXPECT_NEAR(loss_gpu.item(), loss_cpu.item(), 1e-5);
  loss_cpu.backward();
  loss_gpu.backward();
  expect_tensors_close(leaf.grad(), r.grad(), "cross_entropy gradient through bf16",
                       tolerance_for(DType::bf16));
  EXPECT_EQ(count_correct(cast(leaf, DType::bf16), labels.to(gpu)), count_correct(r, labels));
}

// In every compute mode each of resnet20's 9 blocks keeps branch and shortcut in one layout
// and dtype (cuDNN's outputs, shortcut_pad's and add_relu's own), so each runs the fused
// add_relu, none falls back to add + relu.
TEST_F(CudaMixed, EveryBlockOfResnet20RunsTheFusedAddRelu) {
  for (const Mode& m : {Mode{DType::f32, false}, kModes[0], kModes[1], kModes[2]}) {
    for (const char* yaml : {"{name: resnet20}", "{name: resnet20, shortcut: B}"}) {
      SCOPED_TRACE(std::string(yaml) + " in " + m.str());
      auto model = models::build_model(YAML::Load(yaml), {3, 32, 32, 10, 0});
      model->to(gpu);
      model->set_compute({m.dtype, m.nhwc});
      std::map<std::string, int> count =
          dpt::testing::graph_node_counts((*model)(random_tensor({2, 3, 32, 32}, 62).to(gpu)));
      EXPECT_EQ(count["add_relu"], 9);
      EXPECT_EQ(count["add"], 0);
      EXPECT_EQ(count["relu"], 0);
    }
  }
}

TEST_F(CudaMixed, Bf16WeightsAreCastOncePerOptimizerStep) {
  // mnist_cnn in bf16: two forwards between steps give the same result; after a step the
  // bf16 weights are remade from the new f32 weights (a stale cache would repeat `first`).
  auto model = models::build_model(YAML::Load("{name: mnist_cnn}"), {1, 28, 28, 10, 0});
  model->to(gpu);
  model->set_compute({DType::bf16, true});
  optim::Sgd sgd(optim::param_groups(*model, 0.0f, false), {0.9f, false});
  Tensor x = random_tensor({8, 1, 28, 28}, 60).to(gpu), labels = random_labels(8, 10, 61).to(gpu);
  Tensor first = (*model)(x), again = (*model)(x);
  EXPECT_EQ(first.to_vector(), again.to_vector());
  cross_entropy(again, labels).backward();
  for (const Tensor& p : model->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().dtype(), DType::f32);
    EXPECT_TRUE(p.grad().is_contiguous());
  }
  sgd.step(0.5f);
  Tensor after = (*model)(x);
  // A model holding the stepped weights from the start computes the same.
  auto fresh = models::build_model(YAML::Load("{name: mnist_cnn}"), {1, 28, 28, 10, 0});
  fresh->to(gpu);
  fresh->load_state_dict(model->state_dict());
  fresh->set_compute({DType::bf16, true});
  EXPECT_EQ(after.to_vector(), (*fresh)(x).to_vector());
  EXPECT_NE(after.to_vector(), first.to_vector());
}

namespace {

// One training step of `yaml` on CPU f32 and on cuda:0 with `compute`: the loss within 2%,
// every parameter gradient within `gradient_bound` relative L2 error, every gradient f32.
void expect_mixed_step_matches(const std::string& yaml, const models::ModelSpec& spec, int64_t batch,
                               const nn::Compute& compute, double gradient_bound) {
  SCOPED_TRACE(yaml + (compute.dtype == DType::bf16 ? " bf16" : " f32") +
               (compute.channels_last ? " NHWC" : ""));
  auto on_cpu = models::build_model(YAML::Load(yaml), spec);
  auto on_gpu = models::build_model(YAML::Load(yaml), spec);
  on_gpu->to(Device::cuda(0));
  on_gpu->set_compute(compute);
  Tensor x = random_tensor({batch, spec.in_channels, spec.height, spec.width}, 1);
  Tensor labels = random_labels(batch, 10, 2);
  Tensor loss_cpu = cross_entropy((*on_cpu)(x), labels);
  Tensor loss_gpu = cross_entropy((*on_gpu)(x.to(Device::cuda(0))), labels.to(Device::cuda(0)));
  loss_cpu.backward();
  loss_gpu.backward();
  EXPECT_NEAR(loss_gpu.item(), loss_cpu.item(), 2e-2 * std::abs(loss_cpu.item()));
  auto cpu_params = on_cpu->named_parameters(), gpu_params = on_gpu->named_parameters();
  ASSERT_EQ(cpu_params.size(), gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    const std::string& name = cpu_params[i].first;
    const Tensor& g = gpu_params[i].second.grad();
    ASSERT_TRUE(g.defined()) << name << " got no gradient";
    EXPECT_EQ(g.dtype(), DType::f32) << name;
    EXPECT_LT(relative_l2(g, cpu_params[i].second.grad()), gradient_bound) << "gradient of " << name;
  }
  auto cpu_buffers = on_cpu->named_buffers(), gpu_buffers = on_gpu->named_buffers();
  for (size_t i = 0; i < cpu_buffers.size(); ++i)
    EXPECT_LT(relative_l2(gpu_buffers[i].second, cpu_buffers[i].second), 2e-2) << cpu_buffers[i].first;
}

}  // namespace

TEST_F(CudaMixed, ResNet20StepInBf16MatchesCpuF32) {
  const models::ModelSpec cifar{3, 32, 32, 10, 0};
  expect_mixed_step_matches("{name: resnet20}", cifar, 32, {DType::bf16, false}, 0.8);
  expect_mixed_step_matches("{name: resnet20}", cifar, 32, {DType::bf16, true}, 0.8);
  expect_mixed_step_matches("{name: resnet20, shortcut: B}", cifar, 32, {DType::bf16, true}, 0.8);
  // f32 channels-last: only the layout changes; f32 noise (1e-6 per op) moves a ResNet-20
  // gradient by at most 0.021 in the emulation (bf16_step_error.py --f32-noise 1e-6 --batch 8).
  expect_mixed_step_matches("{name: resnet20}", cifar, 32, {DType::f32, true}, 5e-2);
}

TEST_F(CudaMixed, MnistCnnStepInBf16MatchesCpuF32) {
  expect_mixed_step_matches("{name: mnist_cnn}", {1, 28, 28, 10, 0}, 32, {DType::bf16, true}, 0.25);
  expect_mixed_step_matches("{name: mnist_cnn}", {1, 28, 28, 10, 0}, 32, {DType::bf16, false}, 0.25);
}

#endif  // DPT_WITH_CUDA
