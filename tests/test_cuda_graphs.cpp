// CUDA graphs (backend/cuda/graph.h, optim/graphed_train_step.h) on cuda:0: a captured
// piece of work replays with the inputs uploaded before each replay; the capture's memory
// stays in its private pool while the graph lives; what a capture cannot hold fails with a
// clear error and leaves the device usable; and K graphed training steps of mnist_cnn and
// ResNet-20 — SGD with Nesterov and weight decay or AdamW, a learning rate changing every
// step, EMA, and DDP's bucket all-reduce over NCCL at world size 1 — give the losses and
// parameters of the same K steps run eagerly on the GPU; in bf16 channels-last, from device
// batches with evaluations between, each replay uses the current weights. Skipped without
// a GPU.
#include <gtest/gtest.h>

#include "cuda_compare.h"

#ifndef DPT_WITH_CUDA

TEST(CudaGraph, GpuTests) { GTEST_SKIP() << dpt::testing::kNoCudaBackend; }

#else

#include <cmath>
#include <set>

#include "autograd/node.h"
#include "backend/cuda/allocator.h"
#include "backend/cuda/batch_upload.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/graph.h"
#include "backend/cuda/math_settings.h"
#include "parallel/ddp.h"
#include "comm/dist.h"
#include "error_of.h"
#include "inputs.h"
#include "models/registry.h"
#include "ops/cast.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "optim/adamw.h"
#include "optim/ema.h"
#include "optim/graphed_train_step.h"
#include "optim/sgd.h"

using namespace dpt;
using dpt::testing::error_of;
using dpt::testing::expect_tensors_close;
using dpt::testing::random_labels;
using dpt::testing::random_tensor;
using dpt::testing::Tolerance;

namespace {

// Graphed and eager runs are compared closely below, so convolutions take only the cuDNN
// algorithms that give the same bits every run (no atomics): otherwise a last-bit
// difference can put a ReLU input on the other side of 0 and the runs drift apart (a
// simulation, tools/research/train_run_drift.py, shows it even at 1e-8 noise).
class CudaGraph : public dpt::testing::CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (!IsSkipped()) cuda::set_cudnn_deterministic(true);
  }
};

std::vector<float> host_values(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i % 97) - 3.0f;
  return v;
}

TEST_F(CudaGraph, ReplayUsesTheValuesUploadedBeforeIt) {
  const int64_t n = (1 << 20) + 3;  // several blocks per thread in the grid-stride loops
  Tensor input = Tensor::zeros({n}, DType::f32, gpu);
  Tensor total = Tensor::zeros({n}, DType::f32, gpu);
  cuda::Upload upload(n * sizeof(float), 0);
  cuda::GraphedStep step(0, 1, [&] {
    Tensor doubled = mul(input, 2.0f);  // a temporary: allocated and freed inside the capture
    cuda::add_inplace(total, add(doubled, input));
  });
  std::vector<double> expected(static_cast<size_t>(n), 0.0);
  for (int k = 0; k < 6; ++k) {
    std::vector<float> v = host_values(n, 0.25f * static_cast<float>(k + 1));
    upload.copy(input.raw_data(), v.data(), v.size() * sizeof(float));
    step.run();
    for (int64_t i = 0; i < n; ++i) expected[i] += 3.0 * v[i];
  }
  EXPECT_TRUE(step.graphed());
  EXPECT_EQ(step.calls(), 6);
  EXPECT_GE(step.graph().node_count(), 3u);
  std::vector<float> got = total.to_vector();
  for (int64_t i = 0; i < n; i += 4099) ASSERT_FLOAT_EQ(got[i], static_cast<float>(expected[i])) << i;
  ASSERT_FLOAT_EQ(got[n - 1], static_cast<float>(expected[n - 1]));
}

TEST_F(CudaGraph, CaptureMemoryStaysWithTheGraphUntilItIsGone) {
  const int64_t n = 1 << 18;
  Tensor x = Tensor::from_vector(host_values(n, 0.5f), {n}).to(gpu);
  const size_t pool_before = cuda::allocator_stats(0).pool_reserved_bytes;
  Tensor out;
  {
    cuda::Graph graph(0);
    graph.capture([&] { out = add(mul(x, 3.0f), x); });
    EXPECT_GT(cuda::allocator_stats(0).pool_reserved_bytes, pool_before);
    // Eager tensors of the same size never get the graph's blocks.
    std::vector<Tensor> eager;
    for (int i = 0; i < 8; ++i) {
      eager.push_back(Tensor::empty({n}, DType::f32, gpu));
      EXPECT_NE(eager.back().raw_data(), out.raw_data());
    }
    eager.clear();  // back to the shared cache
    graph.replay();
    std::vector<float> got = out.to_vector(), in = x.to_vector();
    for (int64_t i = 0; i < n; i += 257) ASSERT_FLOAT_EQ(got[i], 4.0f * in[i]);
  }
  // The graph is gone; its output, still held here, returns to the shared cache when freed.
  void* block = out.raw_data();
  out = Tensor();
  EXPECT_EQ(cuda::allocator_stats(0).pool_reserved_bytes, pool_before);
  bool reused = false;
  std::vector<Tensor> eager;
  for (int i = 0; i < 24 && !reused; ++i) {  // the eager blocks freed above come first
    eager.push_back(Tensor::empty({n}, DType::f32, gpu));
    reused = eager.back().raw_data() == block;
  }
  EXPECT_TRUE(reused) << "the released graph's memory did not serve eager code again";
}

TEST_F(CudaGraph, WhatCannotBeCapturedFailsClearlyAndTheDeviceStaysUsable) {
  Tensor x = Tensor::from_vector(host_values(1000, 1.0f), {1000}).to(gpu);
  {
    cuda::Graph graph(0);
    std::string message = error_of([&] { graph.capture([&] { (void)mul(x, 2.0f).to_vector(); }); });
    EXPECT_NE(message.find("CUDA graph capture on cuda:0 failed"), std::string::npos) << message;
    EXPECT_NE(message.find("inside a CUDA graph capture"), std::string::npos) << message;
    EXPECT_FALSE(graph.captured());
  }
  {
    cuda::Graph graph(0);
    std::string message =
        error_of([&] { graph.capture([&] { (void)Tensor::full({4}, 1.0f).to(Device::cuda(0)); }); });
    EXPECT_NE(message.find("a copy between the host and cuda:0"), std::string::npos) << message;
  }
  EXPECT_FALSE(cuda::capture_active(0));
  EXPECT_NE(error_of([] { cuda::GraphedStep(0, 0, [] {}); }).find("at least one eager warm-up step"),
            std::string::npos);
  // Eager work after the failed captures.
  std::vector<float> got = mul(x, 2.0f).to_vector(), in = x.to_vector();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_FLOAT_EQ(got[i], 2.0f * in[i]);
}

// --- Training: graphed against eager, both on the GPU.

struct TrainCase {
  std::string model_yaml;
  models::ModelSpec spec;
  int64_t batch;
  bool adamw;
  bool ema;
  bool ddp;  // DistributedDataParallel over the world group (NCCL at world size 1)
  Tolerance tol;
};

struct TrainResult {
  std::vector<float> losses;
  nn::NamedTensors state;  // parameters and buffers, on the CPU
  nn::NamedTensors ema;
  size_t graph_nodes = 0;
};

constexpr int kSteps = 7;
constexpr int kWarmup = 2;

float lr_at(int k) { return 0.05f * (1.0f - 0.1f * static_cast<float>(k)); }  // changes every step

Tensor batch_images(const TrainCase& c, int k) {
  return random_tensor({c.batch, c.spec.in_channels, c.spec.height, c.spec.width}, 100 + k);
}

nn::NamedTensors on_cpu(const nn::NamedTensors& state) {
  nn::NamedTensors out;
  for (const auto& [name, t] : state) out.emplace_back(name, t.to(Device::cpu()));
  return out;
}

TrainResult train(const TrainCase& c, bool graphed) {
  const Device gpu = Device::cuda(0);
  nn::ModulePtr net = models::build_model(YAML::Load(c.model_yaml), c.spec);
  net->to(gpu);
  nn::ModulePtr model = net;
  if (c.ddp) model = std::make_shared<dist::DistributedDataParallel>(net, dist::world());
  auto groups = optim::param_groups(*model, 5e-4f, true);
  std::unique_ptr<optim::Optimizer> optimizer;
  // AdamW's eps well above 1e-8, so the comparison does not hinge on the last bit of every
  // gradient: with eps = 1e-8, g / (|g| + eps) turns a ~1e-9 difference in an element near 0
  // into a different step. With 1e-3 the update still depends on the bias corrections the
  // replays read from the device (the gradients are ~1e-3 and larger).
  if (c.adamw)
    optimizer = std::make_unique<optim::AdamW>(groups, optim::AdamWOptions{.eps = 1e-3f});
  else
    optimizer = std::make_unique<optim::Sgd>(groups, optim::SgdOptions{0.9f, true});
  std::unique_ptr<optim::Ema> ema;
  if (c.ema) ema = std::make_unique<optim::Ema>(*net, 0.9f);
  TrainResult result;
  std::unique_ptr<optim::GraphedTrainStep> step;
  if (graphed)
    step = std::make_unique<optim::GraphedTrainStep>(
        *model, *net, *optimizer, ema.get(), Shape{c.batch, c.spec.in_channels, c.spec.height, c.spec.width},
        optim::GraphedTrainOptions{
            .warmup = kWarmup, .label_smoothing = 0.1f, .classes = 10, .check_loss = true});
  for (int k = 0; k < kSteps; ++k) {
    Tensor x = batch_images(c, k), labels = random_labels(c.batch, 10, 200 + k);
    if (graphed) {
      optim::GraphedStepResult r = step->run(x, labels, lr_at(k));
      EXPECT_TRUE(r.finite) << "step " << k;
      result.losses.push_back(r.loss);
    } else {
      Tensor loss = cross_entropy((*model)(x.to(gpu)), labels.to(gpu), 0.1f);
      optimizer->zero_grad();
      loss.backward();
      optimizer->step(lr_at(k));
      if (ema) ema->update(*net);
      result.losses.push_back(loss.item());
    }
  }
  if (graphed) {
    EXPECT_TRUE(step->graphed());
    result.graph_nodes = step->graph_nodes();
  }
  result.state = on_cpu(net->state_dict());
  if (ema) result.ema = on_cpu(ema->shadow());
  return result;
}

void expect_graphed_matches_eager(const TrainCase& c) {
  if (c.ddp) dist::init();
  TrainResult eager = train(c, false), graphed = train(c, true);
  EXPECT_GT(graphed.graph_nodes, 10u) << c.model_yaml;
  ASSERT_EQ(eager.losses.size(), graphed.losses.size());
  for (size_t k = 0; k < eager.losses.size(); ++k)
    EXPECT_NEAR(graphed.losses[k], eager.losses[k], c.tol.atol + c.tol.rtol * std::abs(eager.losses[k]))
        << c.model_yaml << " step " << k << (k >= kWarmup ? " (replayed)" : " (warm-up)");
  ASSERT_EQ(eager.state.size(), graphed.state.size());
  for (size_t i = 0; i < eager.state.size(); ++i)
    expect_tensors_close(graphed.state[i].second, eager.state[i].second,
                         c.model_yaml + " " + eager.state[i].first, c.tol);
  for (size_t i = 0; i < eager.ema.size(); ++i)
    expect_tensors_close(graphed.ema[i].second, eager.ema[i].second,
                         c.model_yaml + " ema " + eager.ema[i].first, c.tol);
}

const models::ModelSpec kMnist{1, 28, 28, 10, 3};
const models::ModelSpec kCifar{3, 32, 32, 10, 3};
// The same kernels and the same deterministic cuDNN algorithms run in both (CudaGraph's
// SetUp), so the runs should agree to the bit; a little room all the same, far tighter
// than CUDA-vs-CPU.
const Tolerance kMnistTolerance{1e-6, 1e-5};
const Tolerance kResNetTolerance{1e-5, 1e-4};

TEST_F(CudaGraph, MnistCnnSgdNesterovMatchesEager) {
  expect_graphed_matches_eager({"{name: mnist_cnn}", kMnist, 64, false, false, false, kMnistTolerance});
}

TEST_F(CudaGraph, MnistCnnAdamWWithEmaMatchesEager) {
  expect_graphed_matches_eager({"{name: mnist_cnn}", kMnist, 64, true, true, false, kMnistTolerance});
}

TEST_F(CudaGraph, ResNet20SgdNesterovMatchesEager) {
  expect_graphed_matches_eager({"{name: resnet20}", kCifar, 32, false, false, false, kResNetTolerance});
}

TEST_F(CudaGraph, ResNet20AdamWUnderDdpOverNcclMatchesEager) {
  expect_graphed_matches_eager({"{name: resnet20}", kCifar, 32, true, true, true, kResNetTolerance});
}

// train with cuda_graphs, precision: bf16 and channels_last: true: batches already on the
// device (BatchUploader's), and eager evaluations between the warm-up and the capture (an
// epoch no longer than the warm-up) and after replays. Every step's loss is the one an
// eager model holding the weights before that step computes (a capture that skipped the
// bf16 weight cast would replay stale weights), and the evaluation after the replays sees
// the replays' updates (the weight cache remade).
TEST_F(CudaGraph, Bf16ChannelsLastStepsFollowTheWeightsAndEvaluationSeesThem) {
  auto build = [&] {
    nn::ModulePtr m = models::build_model(YAML::Load("{name: resnet20}"), kCifar);
    m->to(gpu);
    m->set_compute({DType::bf16, true});
    return m;
  };
  nn::ModulePtr net = build();
  optim::Sgd sgd(optim::param_groups(*net, 0.0f, false), {0.9f, true});
  optim::GraphedTrainStep step(*net, *net, sgd, nullptr, {16, 3, 32, 32},
                               optim::GraphedTrainOptions{.warmup = 2, .classes = 10});
  const Tensor probe = random_tensor({16, 3, 32, 32}, 50).to(gpu);
  auto evaluate = [&](nn::Module& m) {
    autograd::NoGrad no_grad;
    m.eval();
    Tensor logits = cast(m(probe), DType::f32).to(Device::cpu());
    m.train();
    return logits;
  };
  for (int k = 0; k < 6; ++k) {
    if (k == 2) evaluate(*net);  // before the capture
    Tensor x = random_tensor({16, 3, 32, 32}, 60 + k).to(gpu), labels = random_labels(16, 10, 70 + k).to(gpu);
    nn::ModulePtr before = build();
    before->load_state_dict(net->state_dict());
    float want = 0.0f;
    {
      autograd::NoGrad no_grad;
      want = cross_entropy((*before)(x), labels).item();
    }
    optim::GraphedStepResult r = step.run(x, labels, 0.05f);
    EXPECT_NEAR(r.loss, want, 1e-4 + 1e-4 * std::abs(want)) << "step " << k << (k >= 2 ? " (graph)" : "");
  }
  ASSERT_TRUE(step.graphed());
  nn::ModulePtr after = build();
  after->load_state_dict(net->state_dict());
  expect_tensors_close(evaluate(*net), evaluate(*after), "evaluation after the replays", {1e-5, 1e-5});
  // A label outside the classes in a device batch: the same error as from the host.
  Tensor bad = dpt::testing::labels_of({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 10}).to(gpu);
  EXPECT_NE(error_of([&] { step.run(probe, bad, 0.05f); }).find("label 10 at row 15 is outside [0, 10)"),
            std::string::npos);
}

TEST_F(CudaGraph, NonFiniteGradientsAreFlaggedAfterTheReplay) {
  nn::ModulePtr net = models::build_model(YAML::Load("{name: mnist_cnn}"), kMnist);
  net->to(gpu);
  optim::Sgd sgd(optim::param_groups(*net, 0.0f, false), {0.9f, false});
  optim::GraphedTrainStep step(*net, *net, sgd, nullptr, {8, 1, 28, 28},
                               optim::GraphedTrainOptions{.warmup = 1, .classes = 10});
  Tensor labels = random_labels(8, 10, 1);
  for (int k = 0; k < 4; ++k) {
    Tensor x = random_tensor({8, 1, 28, 28}, k);
    if (k == 3) x.data<float>()[5] = NAN;  // replayed step
    optim::GraphedStepResult r = step.run(x, labels, 0.01f);
    EXPECT_EQ(r.finite, k != 3) << "step " << k;
    // The NaN pixel need not reach the loss: the first conv's fused ReLU maps NaN to 0 (as
    // the CPU's ReLU loop does). It does reach that conv's weight gradient (NaN x 0).
    if (k != 3) {
      EXPECT_TRUE(std::isfinite(r.loss)) << "step " << k;
    }
  }
  // A batch the graph cannot take, and a label outside the classes: clear errors.
  EXPECT_NE(error_of([&] {
              step.run(random_tensor({4, 1, 28, 28}, 9), random_labels(4, 10, 1), 0.01f);
            }).find("the captured step takes [8, 1, 28, 28]"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] {
        step.run(random_tensor({8, 1, 28, 28}, 9), dpt::testing::labels_of({0, 1, 2, 3, 4, 5, 6, 10}), 0.01f);
      }).find("label 10 at row 7 is outside [0, 10)"),
      std::string::npos);
}

TEST_F(CudaGraph, DropoutInsideACaptureIsRefused) {
  nn::ModulePtr net = models::build_model(YAML::Load("{name: mnist_cnn, dropout: 0.5}"), kMnist);
  net->to(gpu);
  optim::Sgd sgd(optim::param_groups(*net, 0.0f, false), {0.0f, false});
  optim::GraphedTrainStep step(*net, *net, sgd, nullptr, {8, 1, 28, 28},
                               optim::GraphedTrainOptions{.warmup = 1, .classes = 10});
  Tensor x = random_tensor({8, 1, 28, 28}, 1), labels = random_labels(8, 10, 1);
  step.run(x, labels, 0.01f);  // eager warm-up
  EXPECT_NE(error_of([&] { step.run(x, labels, 0.01f); }).find("would repeat one mask on every replay"),
            std::string::npos);
}

}  // namespace

#endif
