#include "nn/pipeline_stage.h"

#include <algorithm>

#include "core/error.h"

namespace dpt::nn {
namespace {

std::string unit_names(const std::vector<StageUnit>& units) {
  std::string names;
  for (const StageUnit& unit : units) names += (names.empty() ? "" : ", ") + unit.name;
  return names;
}

}  // namespace

PipelineStage::PipelineStage(std::vector<StageUnit> units, int index, int count)
    : units_(std::move(units)), index_(index), count_(count) {
  DPT_CHECK(!units_.empty()) << "PipelineStage: stage " << index << " of " << count << " holds no units";
  for (const StageUnit& unit : units_)
    for (const auto& [name, module] : unit.modules) register_module(name, module);
}

Tensor PipelineStage::forward(const Tensor& x) {
  Tensor h = x;
  for (const StageUnit& unit : units_) h = unit.forward(h);
  return h;
}

std::string PipelineStage::describe() const {
  return "PipelineStage(" + std::to_string(index_) + " of " + std::to_string(count_) + ": " +
         unit_names(units_) + ")";
}

std::vector<StageUnit> stage_units(Module& model) {
  auto* splittable = dynamic_cast<Splittable*>(&model);
  DPT_CHECK(splittable)
      << "pipeline: cannot cut " << model.describe().substr(0, model.describe().find('\n'))
      << " into stages: it does not list its units (a Sequential does, and so do the ResNets)";
  return splittable->stage_units();
}

std::shared_ptr<PipelineStage> split_stage(Module& model, int count, int index) {
  DPT_CHECK(count >= 1 && index >= 0 && index < count)
      << "pipeline: stage " << index << " of " << count << " does not exist (0 <= stage < stages)";
  std::vector<StageUnit> units = stage_units(model);
  const int n = static_cast<int>(units.size());
  DPT_CHECK(n >= count) << "pipeline: cannot cut the model into " << count << " stages: it has " << n
                        << " unit" << (n == 1 ? "" : "s") << " (" << unit_names(units) << "), so at most "
                        << n << " stage" << (n == 1 ? "" : "s");
  // Stage s holds units [begin, end): n / count each, one more for the first n % count.
  auto begin_of = [&](int s) { return s * (n / count) + std::min(s, n % count); };
  std::vector<StageUnit> mine(units.begin() + begin_of(index), units.begin() + begin_of(index + 1));
  return std::make_shared<PipelineStage>(std::move(mine), index, count);
}

}  // namespace dpt::nn
