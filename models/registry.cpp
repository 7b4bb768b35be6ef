#include "models/registry.h"

#include <map>

namespace dpt::models {
namespace {

std::map<std::string, ModelBuilder>& registry() {
  static std::map<std::string, ModelBuilder> models;  // filled by static registrations only
  return models;
}

std::string joined_names() {
  std::string out;
  for (const auto& name : model_names()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

dist::GroupPtr tensor_parallel_group(ModelArgs& args, const ModelSpec& spec) {
  if (!args.get<bool>("tensor_parallel", false)) return nullptr;
  DPT_CHECK(spec.tp_group) << "model.tensor_parallel: true needs a tensor-parallel group (a mesh with a tp "
                              "axis), and this run has none";
  return spec.tp_group;
}

bool register_model(const std::string& name, ModelBuilder builder) {
  registry()[name] = std::move(builder);
  return true;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& [name, builder] : registry()) names.push_back(name);
  return names;
}

nn::ModulePtr build_model(const YAML::Node& model_node, const ModelSpec& spec) {
  DPT_CHECK(model_node && model_node.IsMap()) << "model: expected a map with a 'name' key";
  DPT_CHECK(model_node["name"]) << "model.name: missing (known models: " << joined_names() << ")";
  std::string name = model_node["name"].as<std::string>();
  auto it = registry().find(name);
  DPT_CHECK(it != registry().end()) << "model.name: unknown model '" << name << "' (known models: " << joined_names()
                                    << ")";
  ModelArgs args(model_node);
  args.get<std::string>("name", "");
  nn::ModulePtr model = it->second(args, spec);
  for (const auto& entry : model_node) {
    std::string key = entry.first.as<std::string>();
    if (args.used().count(key)) continue;
    std::string known;
    for (const auto& k : args.used()) known += (known.empty() ? "" : ", ") + k;
    DPT_FAIL() << "model." << key << ": unknown key for model '" << name << "' (expected one of: " << known << ")";
  }
  return model;
}

}  // namespace dpt::models
