// The run configuration: a YAML file (plus --set overrides) checked into typed structs,
// so that a typo, a wrong type or an impossible value stops the run at start-up with one
// line naming the file, the line and the key, not an hour into training.
#pragma once

#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace dpt::io {

// `model:` is free-form below `name`: the model builder reads its own keys from `node`.
struct ModelConfig {
  std::string name;
  YAML::Node node;  // the whole model mapping, name included
};

struct DatasetConfig {
  std::string name = "fashion_mnist";  // fashion_mnist | mnist | cifar10 | synthetic
  // Directory of the files. Defaults: /usr/share/datasets/fashion-mnist, data/mnist,
  // data/cifar10/cifar-10-batches-bin.
  std::string path;
  // Any dataset: training batches get a random crop (zero padding 4) and a random
  // horizontal flip. Evaluation never does.
  bool augment = false;
  // synthetic only: image shape [C, H, W], class count, sample count.
  std::vector<int64_t> shape = {1, 28, 28};
  int64_t classes = 10;
  int64_t size = 60000;
};

struct OptimizerConfig {
  std::string name = "sgd";      // sgd | adamw
  double lr = 0.1;               // default 0.1 for sgd, 0.001 for adamw
  double weight_decay = 0;       // default 0 for sgd, 0.01 for adamw (decoupled)
  bool no_decay_bias_bn = true;  // no weight decay on biases and batch-norm parameters
  // sgd
  double momentum = 0.9;
  bool nesterov = false;
  // adamw
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
};

struct ScheduleConfig {
  std::string name = "constant";  // constant | multistep | cosine
  int64_t warmup_epochs = 0;      // linear warm-up, before any schedule
  // multistep: lr *= gamma at each milestone epoch (strictly increasing, >= 1)
  std::vector<int64_t> milestones;
  double gamma = 0.1;
  // cosine: decays to min_lr at the last epoch
  double min_lr = 0;
};

struct DistributedConfig {
  double bucket_cap_mb = 25;            // gradient bucket size; 0 = one bucket per parameter
  bool sync_bn = false;                 // synchronised batch-norm statistics across ranks
  bool find_unused_parameters = false;  // allow parameters that get no gradient
  std::string backend = "auto";         // auto | mpi | nccl (auto: NCCL for CUDA tensors, else MPI)
  // A collective not complete after this long ends the run with a message naming the group,
  // the collective, its number and the ranks that did not call it; 0 = wait forever.
  double timeout_s = 1800;
};

// Checkpoints go to <output.dir>/checkpoints (io/checkpoint.h has the layout).
struct CheckpointConfig {
  int64_t every_epochs = 1;  // a checkpoint after every N-th epoch; 0 = only on SIGTERM/SIGINT
  int64_t keep_last = 3;     // older checkpoints are removed; 0 keeps all
};

struct OutputConfig {
  std::string dir;  // default runs/<config file stem>
};

struct Config {
  ModelConfig model;
  DatasetConfig dataset;
  int64_t epochs = 1;
  int64_t batch_size = 128;        // per process
  int64_t eval_batch_size = 1000;  // per process
  int64_t threads = 0;             // compute threads per process; 0 = its share of the cores
  uint64_t seed = 0;
  double label_smoothing = 0;       // in [0, 1)
  int64_t log_every = 50;           // steps
  int64_t max_steps_per_epoch = 0;  // 0 = the whole epoch
  // How the learning rate follows the world size: none, or linear (lr x world size,
  // Goyal et al. 2017; pair it with schedule.warmup_epochs).
  std::string lr_scaling = "none";
  // Exponential moving average of the weights, used for evaluation; 0 = off.
  double ema_decay = 0;
  // none, or collectives: before each collective every rank checks that all call the same
  // operation with the same dtype and element count (a small all-gather per collective).
  std::string debug = "none";
  // Where each rank trains: cpu, cuda (rank r on cuda:(local rank % devices); an error
  // without a device), or auto (cuda where train can use it, else cpu; train.cpp's
  // rank_device.h says when).
  std::string device = "auto";
  // Bit-for-bit reproducible CPU runs from the seed for a given world size and thread
  // count (README: "Determinism").
  bool deterministic = false;
  // A step whose gradients are not finite (NaN or Inf): stop (exit code 3, the last good
  // checkpoint kept) or skip (the update is not applied; training continues).
  std::string on_nonfinite = "stop";
  // Capture the training step as a CUDA graph after 3 eager steps and replay it (README
  // "GPU": when it helps, its limits). Needs a CUDA device and on_nonfinite: stop.
  bool cuda_graphs = false;
  // Mixed precision on CUDA (nn/compute.h): fp32, or bf16 (convolutions and matmuls on
  // tensor cores, f32 master weights, gradients, batch-norm statistics and loss). bf16 and
  // channels_last (NHWC activations) need a CUDA device; the CPU path is f32 and lays out
  // its activations for oneDNN itself.
  std::string precision = "fp32";
  bool channels_last = false;
  CheckpointConfig checkpoint;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  DistributedConfig distributed;
  OutputConfig output;
  std::string source;  // the file it was read from
};

// Reads `path`, applies each override "a.b=value" (the value parsed as YAML, so lists and
// maps work: "schedule.milestones=[2,4]") and checks the result into a Config.
// Throws dpt::Error with a one-line message for: a missing file, malformed YAML
// (file:line:col), an unknown key at any level outside `model:` (listing the known
// ones), a key that does not apply to the chosen optimizer/schedule/dataset, a wrong type
// or an out-of-range value (file:line and key), a bad override. `model.name` is required;
// everything else has the defaults above.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// The resolved configuration as YAML (defaults filled in, only the keys the chosen
// optimizer, schedule and dataset use), for the run directory. load_config on this text
// gives back an equal Config.
std::string config_to_yaml(const Config& config);

}  // namespace dpt::io
