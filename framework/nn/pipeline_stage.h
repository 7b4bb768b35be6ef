// Cutting a model into pipeline stages. A model lists the pieces its forward runs, in order
// (its units); a stage holds a contiguous run of units under their names in the whole
// model. So a stage's parameters are the whole model's own tensors with the same names, and
// stages built on every rank from the same seed start exactly where one process would.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace dpt::nn {

// One piece of a model's forward: the modules it runs, named as in the whole model
// ("layer2.0", "fc"), and the forward through them. The modules are shared with the model,
// and `forward` holds them (not the model), so a unit outlives the model it came from.
struct StageUnit {
  std::string name;  // for messages: "layer2.0", "1-2"
  std::vector<std::pair<std::string, ModulePtr>> modules;
  std::function<Tensor(const Tensor&)> forward;
};

// A model that can be cut between units.
class Splittable {
 public:
  virtual ~Splittable() = default;
  // ensures: running the units' forwards in order is the model's forward, op for op (the
  // same kernels, so the same bits), and every parameter belongs to exactly one unit.
  virtual std::vector<StageUnit> stage_units() = 0;
};

// Stage `index` of `count`: a contiguous run of a model's units. Its parameters, buffers
// and children carry the whole model's names ("layer2.0.conv1.weight").
class PipelineStage : public Module {
 public:
  PipelineStage(std::vector<StageUnit> units, int index, int count);
  Tensor forward(const Tensor& x) override;  // the units in order
  std::string describe() const override;
  int index() const { return index_; }
  int count() const { return count_; }
  bool is_first() const { return index_ == 0; }
  bool is_last() const { return index_ == count_ - 1; }

 private:
  std::vector<StageUnit> units_;
  int index_, count_;
};

// The units of `model`: its stage_units() when it is Splittable (Sequential, the ResNets).
// Throws Error naming the model when it is not.
std::vector<StageUnit> stage_units(Module& model);

// Stage `index` of `count` of `model`, the units split as evenly as possible by number
// (the first stages hold one more when they do not divide). requires: 0 <= index < count.
// Throws Error, the same on every rank, when the model has fewer units than `count`
// (naming the units) or is not Splittable.
std::shared_ptr<PipelineStage> split_stage(Module& model, int count, int index);

}  // namespace dpt::nn
