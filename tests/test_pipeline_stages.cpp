// Cutting models into pipeline stages (nn/pipeline_stage.h), in one process: the stages hold
// exactly the whole model's parameters under its names, running them one after another is
// the whole forward and backward bit for bit, impossible cuts are clear errors, and the
// schedules (parallel/pipeline.h) run each micro-batch's passes in the promised order.
// tests/test_mpi_pipeline.cpp trains the stages across ranks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/rng.h"
#include "parallel/pipeline.h"
#include "error_of.h"
#include "models/registry.h"
#include "nn/pipeline_stage.h"
#include "ops/loss.h"
#include "state_difference.h"

using namespace dpt;
using dpt::testing::error_of;
using dpt::testing::state_difference;
using ::testing::HasSubstr;

namespace {

struct Case {
  const char* yaml;
  models::ModelSpec spec;
  std::vector<std::string> units;
};

const Case kMlp{"{name: mlp, hidden: [16, 12, 8]}", {1, 4, 4, 3, 11}, {"0-2", "3-4", "5-6", "7"}};
const Case kResNet{"{name: resnet_cifar, depth: 14}",
                   {3, 8, 8, 5, 11},
                   {"conv1..layer1.0", "layer1.1", "layer2.0", "layer2.1", "layer3.0", "layer3.1..fc"}};
const Case kPreActB{"{name: resnet_cifar, depth: 8, preact: true, shortcut: B}",
                    {3, 8, 8, 5, 11},
                    {"conv1..layer1.0", "layer2.0", "layer3.0..fc"}};

nn::ModulePtr build(const Case& c) { return models::build_model(YAML::Load(c.yaml), c.spec); }

Tensor input_of(const Case& c, int64_t n) {
  Tensor x = Tensor::empty({n, c.spec.in_channels, c.spec.height, c.spec.width});
  Rng(5).fill_normal(x, 0, 1);
  return x;
}

Tensor labels_of(const Case& c, int64_t n) {
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = (3 * i + 1) % c.spec.num_classes;
  return Tensor::from_vector(y, {n});
}

std::vector<std::string> unit_names(nn::Module& model) {
  std::vector<std::string> names;
  for (const nn::StageUnit& unit : nn::stage_units(model)) names.push_back(unit.name);
  return names;
}

}  // namespace

TEST(PipelineStages, ModelsListTheirUnits) {
  for (const Case* c : {&kMlp, &kResNet, &kPreActB}) {
    SCOPED_TRACE(c->yaml);
    auto model = build(*c);
    EXPECT_EQ(unit_names(*model), c->units);
  }
}

TEST(PipelineStages, StagesHoldTheWholeModelsParametersAndBuffers) {
  // Split one model, compare with another built from the same seed: stage by stage, the
  // names, order and values of the whole model's parameters and buffers.
  for (const Case* c : {&kMlp, &kResNet, &kPreActB}) {
    for (int count = 1; count <= static_cast<int>(c->units.size()); ++count) {
      SCOPED_TRACE(std::string(c->yaml) + ", " + std::to_string(count) + " stages");
      auto reference = build(*c);
      auto model = build(*c);
      nn::NamedTensors params, buffers;
      for (int s = 0; s < count; ++s) {
        auto stage = nn::split_stage(*model, count, s);
        EXPECT_EQ(stage->index(), s);
        EXPECT_EQ(stage->is_last(), s == count - 1);
        for (auto& entry : stage->named_parameters()) params.push_back(entry);
        for (auto& entry : stage->named_buffers()) buffers.push_back(entry);
        for (auto& [name, p] : stage->named_parameters()) EXPECT_TRUE(p.requires_grad()) << name;
      }
      EXPECT_EQ(state_difference(params, reference->named_parameters()), "");
      EXPECT_EQ(state_difference(buffers, reference->named_buffers()), "");
      // The stages share the model's tensors (no copies).
      nn::NamedTensors own = model->named_parameters();
      for (size_t i = 0; i < own.size(); ++i)
        EXPECT_TRUE(params[i].second.is_same(own[i].second)) << own[i].first;
    }
  }
}

TEST(PipelineStages, UnitsAreSplitEvenlyFirstStagesTakingTheRest) {
  auto model = build(kResNet);  // 6 units
  auto names = [&](int count, int s) {
    std::string d = nn::split_stage(*model, count, s)->describe();
    return d.substr(d.find(": ") + 2);
  };
  EXPECT_EQ(names(4, 0), "conv1..layer1.0, layer1.1)");
  EXPECT_EQ(names(4, 1), "layer2.0, layer2.1)");
  EXPECT_EQ(names(4, 2), "layer3.0)");
  EXPECT_EQ(names(4, 3), "layer3.1..fc)");
  EXPECT_EQ(names(3, 2), "layer3.0, layer3.1..fc)");
}

TEST(PipelineStages, StagesInSequenceAreTheWholeModelBitForBit) {
  // Forward stage by stage, handing each the previous output as a fresh leaf; backward in
  // reverse, handing each the next stage's input gradient: the loss, every parameter's
  // gradient and the batch-norm running statistics equal the whole model's exactly.
  for (const Case* c : {&kMlp, &kResNet, &kPreActB}) {
    for (int count : {2, 3}) {
      SCOPED_TRACE(std::string(c->yaml) + ", " + std::to_string(count) + " stages");
      auto reference = build(*c);
      auto model = build(*c);
      Tensor x = input_of(*c, 6), y = labels_of(*c, 6);
      Tensor expected = cross_entropy((*reference)(x), y);
      expected.backward();

      std::vector<std::shared_ptr<nn::PipelineStage>> stages;
      for (int s = 0; s < count; ++s) stages.push_back(nn::split_stage(*model, count, s));
      std::vector<Tensor> inputs, outputs;
      Tensor h = x;
      for (int s = 0; s < count; ++s) {
        if (s > 0) h = h.detach().set_requires_grad(true);
        inputs.push_back(h);
        h = (*stages[s])(h);
        outputs.push_back(h);
      }
      Tensor loss = cross_entropy(h, y);
      EXPECT_EQ(loss.item(), expected.item());
      loss.backward();
      for (int s = count - 2; s >= 0; --s) outputs[s].backward(inputs[s + 1].grad());

      nn::NamedTensors grads, reference_grads;
      for (auto& s : stages)
        for (auto& [name, p] : s->named_parameters()) grads.emplace_back(name, p.grad());
      for (auto& [name, p] : reference->named_parameters()) reference_grads.emplace_back(name, p.grad());
      EXPECT_EQ(state_difference(grads, reference_grads), "");
      EXPECT_EQ(state_difference(model->named_buffers(), reference->named_buffers()), "");
    }
  }
}

TEST(PipelineStages, ImpossibleCutsAreClearErrors) {
  auto mlp = build(kMlp);
  EXPECT_THAT(
      error_of([&] { nn::split_stage(*mlp, 5, 0); }),
      HasSubstr(
          "cannot cut the model into 5 stages: it has 4 units (0-2, 3-4, 5-6, 7), so at most 4 stages"));
  auto resnet = build(kPreActB);
  EXPECT_THAT(error_of([&] { nn::split_stage(*resnet, 4, 3); }),
              HasSubstr("it has 3 units (conv1..layer1.0, layer2.0, layer3.0..fc), so at most 3 stages"));
  EXPECT_THAT(error_of([&] { nn::split_stage(*mlp, 2, 2); }), HasSubstr("stage 2 of 2 does not exist"));
  EXPECT_THAT(error_of([&] { nn::split_stage(*mlp, 0, 0); }), HasSubstr("stage 0 of 0 does not exist"));

  struct Opaque : nn::Module {
    Tensor forward(const Tensor& x) override { return x; }
    std::string describe() const override { return "Opaque(identity)"; }
  } opaque;
  EXPECT_THAT(error_of([&] { nn::split_stage(opaque, 1, 0); }),
              HasSubstr("cannot cut Opaque(identity) into stages: it does not list its units"));
}

TEST(PipelineSchedules, GpipeRunsEveryForwardThenEveryBackward) {
  auto actions = dist::pipeline_actions(dist::PipelineSchedule::gpipe, 3, 1, 3);
  std::string order;
  for (auto& a : actions) order += (a.forward ? "F" : "B") + std::to_string(a.micro_batch) + " ";
  EXPECT_EQ(order, "F0 F1 F2 B0 B1 B2 ");
  EXPECT_EQ(dist::pipeline_max_in_flight(dist::PipelineSchedule::gpipe, 3, 0, 8), 8);
}

TEST(PipelineSchedules, OneFOneBWarmsUpThenAlternates) {
  auto order = [](int stages, int stage, int m) {
    std::string out;
    for (auto& a : dist::pipeline_actions(dist::PipelineSchedule::one_f_one_b, stages, stage, m))
      out += (a.forward ? "F" : "B") + std::to_string(a.micro_batch) + " ";
    return out;
  };
  EXPECT_EQ(order(3, 0, 4), "F0 F1 F2 B0 F3 B1 B2 B3 ");
  EXPECT_EQ(order(3, 1, 4), "F0 F1 B0 F2 B1 F3 B2 B3 ");
  EXPECT_EQ(order(3, 2, 4), "F0 B0 F1 B1 F2 B2 F3 B3 ");
  EXPECT_EQ(order(4, 0, 2), "F0 F1 B0 B1 ");  // fewer micro-batches than the warm-up
  for (int stages = 1; stages <= 4; ++stages)
    for (int s = 0; s < stages; ++s)
      for (int m = 1; m <= 8; ++m) {
        // Stage s holds min(S - s, M) micro-batches at most, and every pass runs once.
        EXPECT_EQ(dist::pipeline_max_in_flight(dist::PipelineSchedule::one_f_one_b, stages, s, m),
                  std::min(stages - s, m));
        auto actions = dist::pipeline_actions(dist::PipelineSchedule::one_f_one_b, stages, s, m);
        ASSERT_EQ(actions.size(), 2u * m);
        std::vector<int> forwards(m, 0), backwards(m, 0);
        int next_backward = 0;
        for (auto& a : actions) {
          if (a.forward) {
            ++forwards[a.micro_batch];
          } else {
            EXPECT_EQ(forwards[a.micro_batch], 1) << "backward before forward";
            EXPECT_EQ(a.micro_batch, next_backward++) << "backwards out of order";
            ++backwards[a.micro_batch];
          }
        }
        EXPECT_EQ(forwards, std::vector<int>(m, 1));
        EXPECT_EQ(backwards, std::vector<int>(m, 1));
      }
}

TEST(PipelineSchedules, BubbleTheory) {
  EXPECT_DOUBLE_EQ(dist::pipeline_bubble_theory(1, 4), 0.0);
  EXPECT_DOUBLE_EQ(dist::pipeline_bubble_theory(2, 1), 0.5);
  EXPECT_DOUBLE_EQ(dist::pipeline_bubble_theory(4, 8), 3.0 / 11.0);
}
