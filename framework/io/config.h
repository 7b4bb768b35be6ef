// The run configuration: a YAML file (plus --set overrides) checked into typed structs,
// so that a typo, a wrong type or an impossible value stops the run at start-up with one
// line naming the file, the line and the key, not an hour into training.
//
// Every key is described once, by a row of io/config_schema.cpp (which says how to add one):
// the parser, the defaults, the error messages, config_to_yaml and the key table of
// docs/configuration.md all come from it.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/ddp_options.h"
#include "comm/hierarchical.h"
#include "parallel/pipeline_schedule.h"
#include "comm/rank_device.h"
#include "optim/schedule.h"

namespace dpt::io {

// The values of a config key that is a choice of names become an enum. kEnumNames<E>
// lists each enum's spelling in the config file, in declaration order.
template <class E>
inline const std::vector<std::string> kEnumNames = {};

enum class DatasetName { fashion_mnist, mnist, cifar10, synthetic };
template <>
inline const std::vector<std::string> kEnumNames<DatasetName> = {"fashion_mnist", "mnist", "cifar10",
                                                                 "synthetic"};

enum class OptimizerName { sgd, adamw };
template <>
inline const std::vector<std::string> kEnumNames<OptimizerName> = {"sgd", "adamw"};

template <>
inline const std::vector<std::string> kEnumNames<optim::ScheduleKind> = {"constant", "multistep", "cosine"};

enum class LrScaling { none, linear };
template <>
inline const std::vector<std::string> kEnumNames<LrScaling> = {"none", "linear"};

enum class CommBackend { automatic, mpi, nccl };
template <>
inline const std::vector<std::string> kEnumNames<CommBackend> = {"auto", "mpi", "nccl"};

template <>
inline const std::vector<std::string> kEnumNames<dist::Hierarchical> = {"auto", "true", "false"};

template <>
inline const std::vector<std::string> kEnumNames<dist::Compression> = {"none", "bf16"};

enum class DebugMode { none, collectives };
template <>
inline const std::vector<std::string> kEnumNames<DebugMode> = {"none", "collectives"};

template <>
inline const std::vector<std::string> kEnumNames<dist::DeviceSetting> = {"auto", "cpu", "cuda"};

enum class Precision { fp32, bf16 };
template <>
inline const std::vector<std::string> kEnumNames<Precision> = {"fp32", "bf16"};

enum class NonfiniteAction { stop, skip };
template <>
inline const std::vector<std::string> kEnumNames<NonfiniteAction> = {"stop", "skip"};

template <>
inline const std::vector<std::string> kEnumNames<dist::PipelineSchedule> = {"gpipe", "1f1b"};

// The config file's name for an enum value, for messages and records: "adamw".
template <class E>
const std::string& name_of(E value) {
  return kEnumNames<E>.at(static_cast<size_t>(value));
}

// The members hold what load_config read or the schema's default. A member that does not
// apply to the chosen optimizer, schedule or dataset (momentum for adamw) is left
// value-initialised (0, false, empty), or at its default in a section held as the code
// that uses it takes it (schedule, pipeline, distributed.ddp). The schema's docs say what each one means.

// `model:` is free-form beside `name`: the model builder reads its own keys from `node`.
struct ModelConfig {
  std::string name;
  YAML::Node node;  // the whole model mapping, name included
};

struct DatasetConfig {
  DatasetName name;
  std::string path;
  bool augment;
  std::vector<int64_t> shape;  // synthetic: [C, H, W]
  int64_t classes;
  int64_t size;
};

struct OptimizerConfig {
  OptimizerName name;
  double lr;
  double momentum;
  bool nesterov;
  std::vector<double> betas;  // two
  double eps;
  double weight_decay;
  bool no_decay_bias_bn;
  bool shard;  // ZeRO-1 over the data-parallel ranks (parallel/zero.h)
};

struct DistributedConfig {
  // The section's DDP keys, held as DDP takes them. Its members that are no keys keep their
  // defaults here (ParallelPlan::wrap, train/parallel_plan.cpp, sets shard_gradients from
  // optimizer.shard).
  dist::DdpOptions ddp;
  CommBackend backend;
  double timeout_s;
  dist::Hierarchical hierarchical;
};

// How the ranks are laid out (train/parallel_plan.h): dp x tp x pp = the world size.
struct ParallelConfig {
  int64_t dp;  // 0: the world size / (tp x pp)
  int64_t tp;
  int64_t pp;
};

struct CheckpointConfig {
  int64_t every_epochs;
  int64_t keep_last;
};

struct OutputConfig {
  std::string dir;
};

struct Config {
  ModelConfig model;
  DatasetConfig dataset;
  int64_t epochs;
  int64_t batch_size;
  int64_t eval_batch_size;
  int64_t max_steps_per_epoch;
  int64_t log_every;
  uint64_t seed;
  int64_t threads;
  bool deterministic;
  double label_smoothing;
  double ema_decay;
  OptimizerConfig optimizer;
  LrScaling lr_scaling;
  optim::ScheduleOptions schedule;  // held as the schedule takes it
  dist::DeviceSetting device;
  Precision precision;
  bool channels_last;
  bool cuda_graphs;
  DistributedConfig distributed;
  ParallelConfig parallel;
  dist::PipelineOptions pipeline;  // how a pipeline (parallel.pp > 1) runs a step, held as it takes it
  DebugMode debug;
  NonfiniteAction on_nonfinite;
  CheckpointConfig checkpoint;
  OutputConfig output;
  std::string source;  // the file it was read from
};

// Reads `path`, applies each override "a.b=value" (the value parsed as YAML, so lists and
// maps work: "schedule.milestones=[2,4]") and checks the result into a Config.
// Throws dpt::Error with a one-line message for: a missing file, malformed YAML
// (file:line:col), an unknown key at any level outside `model:` (listing the known
// ones), a key that does not apply to the chosen optimizer/schedule/dataset, a wrong type
// or an out-of-range value (file:line and key), a missing required key, two keys that
// contradict each other, a bad override. `model.name` is required; everything else has
// the schema's default.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// The resolved configuration as YAML (defaults filled in, only the keys the chosen
// optimizer, schedule and dataset use), for the run directory. load_config on this text
// gives back an equal Config.
std::string config_to_yaml(const Config& config);

// The schema as a markdown table (key, default, values, applies to, meaning): the key
// table of docs/configuration.md, which tools/config_table.cpp writes there.
std::string config_keys_markdown();

}  // namespace dpt::io
