// The ResNets (models/resnet_cifar.cpp, models/resnet18.cpp): parameter and MAC counts
// worked out by hand from the architecture, shapes on both input sizes, the option-A
// shortcut op (values and finite differences), YAML keys and errors, and a sanity run
// where a ResNet-20 fits one fixed batch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "autograd/node.h"
#include "backend/cpu/onednn.h"
#include "error_of.h"
#include "gradcheck.h"
#include "graph_nodes.h"
#include "models/blocks.h"
#include "models/registry.h"
#include "models/summary.h"
#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/loss.h"
#include "ops/mac_count.h"
#include "ops/shortcut_pad.h"
#include "optim/sgd.h"

using namespace dpt;
using dpt::testing::error_of;
using ::testing::HasSubstr;

namespace {

const models::ModelSpec kCifar{3, 32, 32, 10, 0};
const models::ModelSpec kMnist{1, 28, 28, 10, 0};

nn::ModulePtr build(const std::string& yaml, const models::ModelSpec& spec = kCifar) {
  return models::build_model(YAML::Load(yaml), spec);
}

// Option A, 10 classes, n blocks per stage (depth 6n + 2), counted by hand:
//   stem conv 3*16*9 + BN 2*16                                   = 464
//   stage 1: n blocks of 2 convs 16*16*9 + 2 BN 2*16             = n * 4,672
//   stage 2: 16*32*9 + 32*32*9 + 2 BN 2*32 = 13,952, then (n-1) * 18,560
//   stage 3: 32*64*9 + 64*64*9 + 2 BN 2*64 = 55,552, then (n-1) * 73,984
//   fc 64*10 + 10                                                = 650
// total = 97,216 n - 21,926.
int64_t cifar_option_a_params(int64_t n) { return 97216 * n - 21926; }
// Option B adds two projections: 16*32 + BN 2*32 and 32*64 + BN 2*64.
constexpr int64_t kProjectionParams = 576 + 2176;

Tensor normal(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Rng(seed).fill_normal(t, 0, 1);
  return t;
}

Tensor labels_of(int64_t n) {
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = (i * 3) % 10;
  return Tensor::from_vector(y, {n});
}

}  // namespace

TEST(ResNet, ParameterCountsOfTheCifarResNets) {
  EXPECT_EQ(cifar_option_a_params(3), 269722);  // He et al. Table 6: 0.27M
  const std::pair<const char*, int64_t> depths[] = {
      {"resnet20", 3}, {"resnet32", 5}, {"resnet44", 7}, {"resnet56", 9}, {"resnet110", 18}};
  for (auto [name, n] : depths) {
    SCOPED_TRACE(name);
    EXPECT_EQ(build(std::string("{name: ") + name + "}")->parameter_count(), cifar_option_a_params(n));
    EXPECT_EQ(build(std::string("{name: ") + name + ", shortcut: B}")->parameter_count(),
              cifar_option_a_params(n) + kProjectionParams);
  }
  EXPECT_EQ(build("{name: resnet20}")->parameter_count(), 269722);
  EXPECT_EQ(build("{name: resnet32}")->parameter_count(), 464154);
  EXPECT_EQ(build("{name: resnet44}")->parameter_count(), 658586);
  EXPECT_EQ(build("{name: resnet56}")->parameter_count(), 853018);
  EXPECT_EQ(build("{name: resnet110}")->parameter_count(), 1727962);
  EXPECT_EQ(build("{name: resnet20, shortcut: B}")->parameter_count(), 272474);
  EXPECT_EQ(build("{name: resnet_cifar, depth: 56}")->parameter_count(), 853018);
  // Pre-activation: no stem BN (-32); stage 2 and 3's first bn1 sees 16 and 32 channels,
  // not 32 and 64 (-32 - 64); a final BN over 64 (+128): the same total.
  EXPECT_EQ(build("{name: resnet20, preact: true}")->parameter_count(), 269722);
  // 1x28x28 input: only the stem's in_channels change (3 -> 1: 2 * 16 * 9 fewer).
  EXPECT_EQ(build("{name: resnet20}", kMnist)->parameter_count(), 269722 - 288);
}

TEST(ResNet, ParameterCountOfResNet18) {
  EXPECT_EQ(build("{name: resnet18}")->parameter_count(), 11173962);
  // Option A drops the three projections: 64*128 + 256, 128*256 + 512, 256*512 + 1024.
  EXPECT_EQ(build("{name: resnet18, shortcut: A}")->parameter_count(), 11173962 - 8448 - 33280 - 132096);
}

TEST(ResNet, MultiplyAccumulatesPerImage) {
  // Convolutions and the classifier, per 32x32 image: stem 32*32*16*27 = 442,368; stage 1
  // 6 convs of 32*32*16*16*9 = 2,359,296; stages 2 and 3 each 1,179,648 (the strided conv)
  // + 5 * 2,359,296; fc 640. Total 40,551,040.
  auto resnet20 = build("{name: resnet20}");
  EXPECT_EQ(models::macs_per_image(*resnet20, kCifar), 40551040);
  // Option B adds 16*16*32*16 + 8*8*64*32 for the two 1x1 projections (40.8M in all).
  EXPECT_EQ(models::macs_per_image(*build("{name: resnet20, shortcut: B}"), kCifar), 40551040 + 2 * 131072);
  // ResNet-18: stem 1,769,472; stage 1 4 * 37,748,736; stages 2-4 each 18,874,368
  // + 3 * 37,748,736 + 2,097,152 (projection); fc 5,120. Total 555,422,720 (0.56G).
  EXPECT_EQ(models::macs_per_image(*build("{name: resnet18}"), kCifar), 555422720);
  // On 28x28 maps (28, 14, 7): stem 28*28*16*9 = 112,896 with one input channel.
  int64_t mnist = 112896 + 6 * 28 * 28 * 16 * 16 * 9 + 14 * 14 * 32 * (16 + 5 * 32) * 9 +
                  7 * 7 * 64 * (32 + 5 * 64) * 9 + 640;
  EXPECT_EQ(models::macs_per_image(*build("{name: resnet20}", kMnist), kMnist), mnist);
}

TEST(ResNet, MacsPerImageLeavesTheModelAsItWas) {
  auto model = build("{name: resnet20}");
  auto before = model->state_dict();
  models::macs_per_image(*model, kCifar);
  EXPECT_TRUE(model->is_training());
  auto after = model->state_dict();
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(before[i].second.to_vector(), after[i].second.to_vector()) << before[i].first;
    EXPECT_FALSE(after[i].second.grad().defined()) << before[i].first;
  }
  model->eval();
  models::macs_per_image(*model, kCifar);
  EXPECT_FALSE(model->is_training());
}

TEST(MacCounter, CountsConvAndLinearAndNests) {
  Tensor x = normal({2, 4, 5, 5}, 1), w = normal({6, 2, 3, 3}, 2);  // 2 groups
  Tensor a = normal({3, 7}, 3), lw = normal({5, 7}, 4);
  conv2d(x, w, Tensor(), {.padding = 1, .groups = 2});  // not counted: no counter alive
  MacCounter outer;
  conv2d(x, w, Tensor(), {.padding = 1, .groups = 2});
  EXPECT_EQ(outer.total(), 2 * 6 * 5 * 5 * 2 * 3 * 3);
  {
    MacCounter inner;
    linear(a, lw, Tensor());
    EXPECT_EQ(inner.total(), 3 * 7 * 5);
  }
  EXPECT_EQ(outer.total(), 2 * 6 * 5 * 5 * 2 * 3 * 3 + 3 * 7 * 5);
}

TEST(ResNet, EveryDepthAndVariantGivesLogitsOnBothInputSizes) {
  autograd::NoGrad no_grad;  // forward only: the training step is tested below
  for (const char* yaml :
       {"{name: resnet20}", "{name: resnet32, shortcut: B}", "{name: resnet44, preact: true}",
        "{name: resnet56}", "{name: resnet110}", "{name: resnet18}"}) {
    for (const auto& spec : {kCifar, kMnist}) {
      SCOPED_TRACE(std::string(yaml) + " " + std::to_string(spec.height));
      Tensor logits = (*build(yaml, spec))(normal({3, spec.in_channels, spec.height, spec.width}, 5));
      EXPECT_EQ(logits.shape(), (Shape{3, 10}));
      for (float v : logits.to_vector()) ASSERT_TRUE(std::isfinite(v));
    }
  }
}

TEST(ResNet, PreActivationVariantsTrainOneStep) {
  for (const char* yaml : {"{name: resnet20, preact: true}", "{name: resnet20, preact: true, shortcut: B}",
                           "{name: resnet18, preact: true}"}) {
    for (const auto& spec : {kCifar, kMnist}) {
      SCOPED_TRACE(std::string(yaml) + " " + std::to_string(spec.height));
      auto model = build(yaml, spec);
      optim::Sgd sgd(optim::param_groups(*model, 5e-4f, false), {0.9f, true});
      Tensor x = normal({4, spec.in_channels, spec.height, spec.width}, 6);
      Tensor loss = cross_entropy((*model)(x), labels_of(4));
      loss.backward();
      for (auto& [name, p] : model->named_parameters()) ASSERT_TRUE(p.grad().defined()) << name;
      sgd.step(0.1f);
      EXPECT_TRUE(std::isfinite(cross_entropy((*model)(x), labels_of(4)).item()));
    }
  }
}

TEST(ResNet, ParameterNamesFollowPytorchCifar) {
  auto names = [](const nn::ModulePtr& m) {
    std::vector<std::string> out;
    for (auto& [name, p] : m->named_parameters()) out.push_back(name);
    return out;
  };
  auto b = names(build("{name: resnet20, shortcut: B}"));
  EXPECT_EQ(b.front(), "conv1.weight");
  EXPECT_EQ(b.back(), "fc.bias");
  EXPECT_THAT(b, ::testing::Contains("layer2.0.shortcut.0.weight"));
  EXPECT_THAT(b, ::testing::Contains("layer3.2.bn2.bias"));
  EXPECT_THAT(names(build("{name: resnet20}")),
              ::testing::Not(::testing::Contains("layer2.0.shortcut.0.weight")));
  EXPECT_THAT(names(build("{name: resnet20, preact: true}")), ::testing::Contains("bn_final.weight"));
}

TEST(ResNet, InitialisationIsKaimingFanOutAndZeroInitResidualZeroesTheLastBn) {
  auto model = build("{name: resnet56, zero_init_residual: true}");
  for (auto& [name, p] : model->named_parameters()) {
    std::vector<float> v = p.to_vector();
    if (name.ends_with("bn2.weight")) {
      for (float x : v) ASSERT_EQ(x, 0.0f) << name;
    } else if (name.ends_with("bn1.weight")) {
      for (float x : v) ASSERT_EQ(x, 1.0f) << name;
    } else if (name == "layer3.0.conv1.weight") {  // 32 -> 64: fan_out 64 * 9, fan_in 32 * 9
      double sq = 0;
      for (float x : v) sq += double(x) * x;
      EXPECT_NEAR(std::sqrt(sq / v.size()), std::sqrt(2.0 / (64 * 9)), 0.002);  // fan_in would give 0.083
    }
  }
  // Same seed, same weights on every rank.
  EXPECT_EQ(build("{name: resnet20}")->state_dict()[0].second.to_vector(),
            build("{name: resnet20}")->state_dict()[0].second.to_vector());
}

TEST(ResNet, BadKeysAreClearErrors) {
  EXPECT_THAT(error_of([] { build("{name: resnet_cifar, depth: 21}"); }),
              HasSubstr("model.depth: a CIFAR ResNet has depth 6n + 2"));
  EXPECT_THAT(error_of([] { build("{name: resnet20, shortcut: C}"); }),
              HasSubstr("model.shortcut: expected A (subsample + zero channels"));
  EXPECT_THAT(error_of([] { build("{name: resnet20, preact: true, zero_init_residual: true}"); }),
              HasSubstr("model.zero_init_residual: needs preact: false"));
  EXPECT_THAT(error_of([] { build("{name: resnet20, depth: 32}"); }),
              HasSubstr("model.depth: unknown key for model 'resnet20'"));
  EXPECT_THAT(error_of([] { build("{name: resnet18, widht: 3}"); }), HasSubstr("model.widht: unknown key"));
}

TEST(ShortcutPad, SubsamplesAndPadsZeroChannels) {
  // x[n, c, h, w] = 100 n + 10 c + ... distinct values; 5x5 with stride 2 keeps rows and
  // columns 0, 2, 4 (a 3x3 map, as a 3x3 conv with padding 1 and stride 2 gives).
  Tensor x = Tensor::empty({2, 2, 5, 5});
  std::vector<float> v(x.numel());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  x = Tensor::from_vector(v, {2, 2, 5, 5});
  Tensor out = shortcut_pad(x, 3, 2);
  ASSERT_EQ(out.shape(), (Shape{2, 3, 3, 3}));
  std::vector<float> o = out.to_vector();
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t y = 0; y < 3; ++y) {
        for (int64_t xx = 0; xx < 3; ++xx) {
          float expected = c < 2 ? v[((n * 2 + c) * 5 + 2 * y) * 5 + 2 * xx] : 0.0f;
          EXPECT_EQ(o[((n * 3 + c) * 3 + y) * 3 + xx], expected) << n << " " << c << " " << y << " " << xx;
        }
      }
    }
  }
  EXPECT_EQ(shortcut_pad(x, 2, 1).to_vector(), v);  // stride 1, same channels: the identity
  EXPECT_THAT(error_of([&] { shortcut_pad(x, 1, 2); }), HasSubstr("more than out_channels 1"));
}

TEST(ShortcutPad, GradientMatchesFiniteDifferences) {
  dpt::testing::GradCheckOptions all;
  all.max_elements = 1000;  // every element: the unsampled positions must get exactly 0
  for (auto [h, stride] : {std::pair<int64_t, int64_t>{6, 2}, {7, 2}, {5, 3}, {4, 1}}) {
    SCOPED_TRACE(std::to_string(h) + " stride " + std::to_string(stride));
    Tensor x = dpt::testing::random_tensor({2, 3, h, h + 1}, 7);
    x.set_requires_grad(true);
    dpt::testing::expect_gradients_match(
        [stride](const std::vector<Tensor>& in) { return shortcut_pad(in[0], 5, stride); }, {x}, all);
  }
  // A strided view is read through its strides (gradcheck.h perturbs memory in order, so
  // views are checked here on the forward only).
  Tensor wide = dpt::testing::random_tensor({2, 3, 4, 8}, 8);
  Tensor view = wide.as_strided({2, 3, 4, 4}, {96, 32, 8, 2}, 0);  // every other column
  EXPECT_EQ(shortcut_pad(view, 4, 2).to_vector(), shortcut_pad(view.contiguous(), 4, 2).to_vector());
}

// A BasicBlock ends in the fused add_relu, and gives what its children give composed by
// hand with unfused ops: relu(add(bn2(conv2(relu(bn1(conv1(x))))), shortcut(x))), forward and
// backward. Its input comes in the layout the CPU convolutions write (channels-last unless
// DPT_CHANNELS_LAST=0), as inside a network, so branch and shortcut share one layout.
TEST(ResNet, BasicBlockEndsInAddReluAndMatchesItsChildrenComposed) {
  struct Case {
    int64_t in, out, stride;
    models::ShortcutKind shortcut;
  };
  for (const Case& c : {Case{8, 8, 1, models::ShortcutKind::pad}, Case{8, 16, 2, models::ShortcutKind::pad},
                        Case{8, 16, 2, models::ShortcutKind::projection}}) {
    SCOPED_TRACE(std::to_string(c.in) + " -> " + std::to_string(c.out));
    Rng rng(12);
    models::BasicBlock block(c.in, c.out, c.stride, {.shortcut = c.shortcut}, rng);
    Tensor x0 = normal({4, c.in, 8, 8}, 13);
    Tensor x = (cpu::onednn::channels_last_enabled() ? x0.channels_last() : x0).set_requires_grad(true);
    Tensor rx = x.detach().clone_preserving_strides().set_requires_grad(true);
    Tensor y = block.forward(x);
    ASSERT_TRUE(y.grad_fn());
    EXPECT_EQ(y.grad_fn()->name, "add_relu");
    std::vector<nn::Module*> m = block.modules();  // block, conv1, bn1, conv2, bn2[, shortcut[, its parts]]
    Tensor h = m[4]->forward(m[3]->forward(relu(m[2]->forward(m[1]->forward(rx)))));
    Tensor ref = relu(add(h, m.size() > 5 ? m[5]->forward(rx) : rx));
    std::vector<float> vy = y.to_vector(), vr = ref.to_vector();
    for (size_t i = 0; i < vy.size(); ++i) ASSERT_NEAR(vy[i], vr[i], 1e-5 + 1e-5 * std::fabs(vr[i])) << i;
    Tensor g = normal(y.shape(), 14);
    y.backward(g);
    Tensor conv1_grad = block.named_parameters().at(0).second.grad().clone();  // "conv1.weight"
    for (auto& [name, p] : block.named_parameters()) p.set_grad(Tensor());
    ref.backward(g);
    std::vector<float> gx = x.grad().to_vector(), gr = rx.grad().to_vector();
    for (size_t i = 0; i < gx.size(); ++i) ASSERT_NEAR(gx[i], gr[i], 1e-4 + 1e-4 * std::fabs(gr[i])) << i;
    std::vector<float> gw = conv1_grad.to_vector(),
                       gwr = block.named_parameters().at(0).second.grad().to_vector();
    for (size_t i = 0; i < gw.size(); ++i) ASSERT_NEAR(gw[i], gwr[i], 1e-4 + 1e-4 * std::fabs(gwr[i])) << i;
  }
}

// Every one of resnet20's 9 blocks takes the fused path in the network as built (no block
// falls back to add + relu over a layout mismatch): the recorded graph has 9 add_relu nodes
// and no add or relu node.
TEST(ResNet, EveryBlockOfResnet20RunsTheFusedAddRelu) {
  for (const char* yaml : {"{name: resnet20}", "{name: resnet20, shortcut: B}"}) {
    SCOPED_TRACE(yaml);
    Tensor logits = (*build(yaml))(normal({2, 3, 32, 32}, 15));
    std::map<std::string, int> count = dpt::testing::graph_node_counts(logits);
    EXPECT_EQ(count["add_relu"], 9);
    EXPECT_EQ(count["add"], 0);
    EXPECT_EQ(count["relu"], 0);
  }
}

TEST(ResNet, Resnet20FitsOneFixedBatch) {
  auto model = build("{name: resnet20}");
  optim::Sgd sgd(optim::param_groups(*model, 0.0f, false), {0.9f, false});
  Tensor x = normal({8, 3, 32, 32}, 11);
  Tensor y = labels_of(8);
  std::vector<float> losses;
  for (int step = 0; step < 20; ++step) {
    Tensor loss = cross_entropy((*model)(x), y);
    losses.push_back(loss.item());
    sgd.zero_grad();
    loss.backward();
    sgd.step(0.05f);
  }
  EXPECT_NEAR(losses.front(), std::log(10.0f), 1.0f);
  EXPECT_LT(losses.back(), 0.5f * losses.front()) << "first " << losses.front() << ", last " << losses.back();
}
