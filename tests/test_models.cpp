// Every registered model builds, runs forward and backward on both input sizes the
// datasets give (1x28x28 and 3x32x32) with a finite, non-zero gradient for every
// parameter, and the registry rejects bad model configs.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <algorithm>
#include <cmath>

#include "error_of.h"
#include "models/registry.h"
#include "nn/layers.h"
#include "nn/sequential.h"
#include "ops/loss.h"

using namespace dpt;
using ::testing::HasSubstr;
using dpt::testing::error_of;

namespace {

YAML::Node model_node(const std::string& text) { return YAML::Load(text); }

}  // namespace

TEST(Models, EveryModelTrainsOneStepOnBothInputSizes) {
  ASSERT_GE(models::model_names().size(), 3u);
  for (const std::string& name : models::model_names()) {
    for (auto [c, hw] : {std::pair<int64_t, int64_t>{1, 28}, {3, 32}}) {
      SCOPED_TRACE(name + " " + std::to_string(c) + "x" + std::to_string(hw));
      YAML::Node node;
      node["name"] = name;
      auto model = models::build_model(node, {c, hw, hw, 10, 0});
      Tensor x = Tensor::empty({2, c, hw, hw});
      Rng(3).fill_normal(x, 0, 1);
      Tensor logits = (*model)(x);
      ASSERT_EQ(logits.shape(), (Shape{2, 10}));
      cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{1, 7}, {2})).backward();
      for (auto& [pname, p] : model->named_parameters()) {
        ASSERT_TRUE(p.grad().defined()) << pname << " got no gradient";
        EXPECT_EQ(p.grad().shape(), p.shape()) << pname;
        // Every parameter takes part in the loss: a layer cut off from it (or a backward
        // that writes nothing or garbage) shows as an all-zero or non-finite gradient.
        std::vector<float> g = p.grad().to_vector();
        EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float v) { return std::isfinite(v); }))
            << pname << " has a non-finite gradient";
        EXPECT_TRUE(std::any_of(g.begin(), g.end(), [](float v) { return v != 0.0f; }))
            << pname << " has an all-zero gradient";
      }
    }
  }
}

TEST(Models, ParameterCountsMatchTheArchitectures) {
  auto count = [](const char* yaml) { return models::build_model(model_node(yaml), {1, 28, 28, 10, 0})->parameter_count(); };
  // conv 1->32 (288+32), conv 32->64 (18432+64), fc 3136->128 (401408+128), fc 128->10 (1280+10)
  EXPECT_EQ(count("{name: mnist_cnn}"), 320 + 18496 + 401536 + 1290);
  // conv 1->6 5x5 (150+6), conv 6->16 5x5 (2400+16), 400->120, 120->84, 84->10
  EXPECT_EQ(count("{name: lenet5}"), 156 + 2416 + 48120 + 10164 + 850);
  EXPECT_EQ(count("{name: mlp, hidden: [100]}"), 784 * 100 + 100 + 100 * 10 + 10);
}

TEST(Models, SameSeedSameWeightsAndStateDictRoundTrip) {
  auto a = models::build_model(model_node("{name: mnist_cnn}"), {1, 28, 28, 10, 5});
  auto b = models::build_model(model_node("{name: mnist_cnn}"), {1, 28, 28, 10, 5});
  auto c = models::build_model(model_node("{name: mnist_cnn}"), {1, 28, 28, 10, 6});
  auto sa = a->state_dict(), sb = b->state_dict(), sc = c->state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  EXPECT_EQ(sa[0].first, "0.weight");
  EXPECT_EQ(sa[0].second.to_vector(), sb[0].second.to_vector());
  EXPECT_NE(sa[0].second.to_vector(), sc[0].second.to_vector());
  c->load_state_dict(sa);
  EXPECT_EQ(c->state_dict()[0].second.to_vector(), sa[0].second.to_vector());
  auto wrong = sa;
  wrong[0].second = Tensor::zeros({3});
  EXPECT_THAT(error_of([&] { c->load_state_dict(wrong); }), HasSubstr("'0.weight' has shape [3]"));
}

TEST(Models, BadModelConfigsAreClearErrors) {
  models::ModelSpec spec{1, 28, 28, 10, 0};
  EXPECT_THAT(error_of([&] { models::build_model(model_node("{name: resnet9000}"), spec); }),
              HasSubstr("unknown model 'resnet9000' (known models:"));
  EXPECT_THAT(error_of([&] { models::build_model(model_node("{name: mlp, hiden: [3]}"), spec); }),
              HasSubstr("model.hiden: unknown key for model 'mlp'"));
  EXPECT_THAT(error_of([&] { models::build_model(model_node("{name: mlp, hidden: lots}"), spec); }),
              HasSubstr("model.hidden: wrong type"));
  for (const char* yaml : {"{name: mlp, tensor_parallel: true}", "{name: resnet20, tensor_parallel: true}"})
    EXPECT_THAT(error_of([&] { models::build_model(model_node(yaml), spec); }),
                HasSubstr("model.tensor_parallel: true needs a tensor-parallel group"));
}

TEST(Sequential, FusedReluGivesTheSameResultAsSeparateRelu) {
  Rng rng(1);
  auto linear = std::make_shared<nn::Linear>(6, 4, rng);
  nn::Sequential fused;
  fused.add(linear).add(std::make_shared<nn::ReLU>());
  Tensor x = Tensor::empty({3, 6});
  Rng(2).fill_normal(x, 0, 1);
  std::vector<float> expected = nn::ReLU().forward(linear->forward(x)).to_vector();
  EXPECT_EQ(fused.forward(x).to_vector(), expected);
}
