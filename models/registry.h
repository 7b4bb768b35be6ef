// Models by name. A model file defines a builder and registers it with one line:
//   DPT_REGISTER_MODEL(mnist_cnn, build_mnist_cnn);
// The YAML `model:` node chooses the model and carries its own keys; a key the builder
// never read is reported as unknown.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "nn/module.h"

namespace dpt::models {

// What the data says about the model's input and output, and the run's tensor-parallel
// group. (A constructor rather than an aggregate, so {c, h, w, classes, seed} needs no group.)
struct ModelSpec {
  ModelSpec() = default;
  ModelSpec(int64_t in_channels, int64_t height, int64_t width, int64_t num_classes, uint64_t seed,
            dist::GroupPtr tp_group = nullptr)
      : in_channels(in_channels),
        height(height),
        width(width),
        num_classes(num_classes),
        seed(seed),
        tp_group(std::move(tp_group)) {}

  int64_t in_channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  int64_t num_classes = 10;
  uint64_t seed = 0;  // initialisation; identical on every rank
  // The tensor-parallel group of this rank (the "tp" axis of the mesh), for the models
  // with a `tensor_parallel` key; null when the run has none.
  dist::GroupPtr tp_group;
};

// The model's YAML keys, read with defaults; remembers which keys were read.
class ModelArgs {
 public:
  explicit ModelArgs(YAML::Node node) : node_(std::move(node)) {}
  template <class T>
  T get(const std::string& key, const T& fallback);
  const std::set<std::string>& used() const { return used_; }

 private:
  YAML::Node node_;
  std::set<std::string> used_;
};

using ModelBuilder = std::function<nn::ModulePtr(ModelArgs& args, const ModelSpec& spec)>;

// Reads the model's `tensor_parallel` key (default false): spec.tp_group when true, null
// when false. Throws Error when it is true and spec has no tensor-parallel group.
dist::GroupPtr tensor_parallel_group(ModelArgs& args, const ModelSpec& spec);

bool register_model(const std::string& name, ModelBuilder builder);
std::vector<std::string> model_names();
// `model_node` is the config's `model:` map (with `name`). Throws Error for an unknown
// name (listing the known ones), an unknown key, or a key of the wrong type.
nn::ModulePtr build_model(const YAML::Node& model_node, const ModelSpec& spec);

template <class T>
T ModelArgs::get(const std::string& key, const T& fallback) {
  used_.insert(key);
  YAML::Node value = node_[key];
  if (!value) return fallback;
  try {
    return value.as<T>();
  } catch (const YAML::Exception&) {
    throw Error("model." + key + ": wrong type (line " + std::to_string(value.Mark().line + 1) + ")");
  }
}

}  // namespace dpt::models

#define DPT_REGISTER_MODEL(name, builder) \
  static const bool dpt_model_registered_##name = ::dpt::models::register_model(#name, builder)
