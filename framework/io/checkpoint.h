// Training checkpoints. Checkpoint S (after S optimizer steps) is three files in one
// directory:
//   step-S.safetensors            the model's parameters and buffers, nothing else, so
//                                 PyTorch's load_state_dict takes it as it is;
//   step-S.optimizer.safetensors  the optimizer's tensors ("momentum.<param>", or
//                                 "exp_avg.<param>" and "exp_avg_sq.<param>") and the
//                                 EMA's ("ema.<name>"), exact;
//   step-S.json                   where training stands (epoch, step, sampler position),
//                                 the optimizer's step count, RNG states, the run's
//                                 counters, world size, threads and the resolved config.
// Each file is replaced atomically and the JSON is written last, so a checkpoint exists
// exactly when its JSON does; a crash mid-write leaves the previous ones intact.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/atomic_file.h"
#include "nn/module.h"
#include "optim/ema.h"
#include "optim/optimizer.h"

namespace dpt::io {

// What a checkpoint saves and restores. Non-owning.
struct TrainingObjects {
  nn::Module& model;  // the bare model, not its DDP wrapper (names without "module.")
  std::string model_name;
  optim::Optimizer& optimizer;
  std::string optimizer_name;
  optim::Ema* ema = nullptr;  // nullptr when off
};

// Where training stands after `step` optimizer steps, and the counters the run's summary
// continues from.
struct TrainingProgress {
  int64_t step = 0;           // optimizer steps done in the run (skipped ones included)
  int64_t epoch = 0;          // the epoch in progress, from 0; at an epoch's end, the next one
  int64_t step_in_epoch = 0;  // steps of `epoch` done (0 at an epoch boundary)
  // Samples of the epoch's global order trained on: step_in_epoch x batch_size x world_size.
  int64_t samples_in_epoch = 0;
  // The epoch's training loss so far, for its metrics line: the sum over its applied steps
  // of the loss averaged over ranks, and the count of those steps.
  double epoch_loss_sum = 0;
  int64_t epoch_steps_applied = 0;
  int64_t skipped_steps = 0;  // steps skipped for non-finite gradients
  int64_t train_images = 0;
  double train_time_s = 0, best_test_acc = 0, final_test_acc = 0;
};

struct CheckpointInfo {
  TrainingProgress progress;
  int world_size = 1;
  int64_t batch_size = 0;  // per process
  int threads = 0;
  bool deterministic = false;
  float lr = 0;             // the learning rate of the last step (informative)
  std::string config_yaml;  // the resolved configuration the run used
};

// Everything a checkpoint's JSON holds.
struct CheckpointRecord {
  CheckpointInfo info;
  std::string model_name, optimizer_name;
  std::string model_file, optimizer_file;  // bare file names, beside the JSON
  int64_t optimizer_steps = 0;             // Optimizer::step_count()
  bool has_ema = false;
  int64_t ema_updates = 0;
  std::vector<std::string> dropout_rng;  // Rng::state() of each dropout layer, in module order
};

// Writes checkpoint S = info.progress.step into `dir` (created if missing): the model and
// optimizer files, then the JSON. Then removes checkpoints of steps after S (abandoned by
// a run resumed from an earlier one) and before the `keep_last` newest up to S (0 keeps
// all), with any files a crashed writer left behind. Returns the JSON's path. On failure throws dpt::Error
// naming the file and the reason; the checkpoints already in `dir` are intact.
// `optimizer_state` is objects.optimizer.state_for_save(), which a sharded optimizer
// (parallel/zero.h) gathers with every rank of its group before its rank 0 saves.
std::string checkpoint_save(const std::string& dir, const TrainingObjects& objects,
                            const std::vector<optim::Optimizer::StateTensor>& optimizer_state,
                            const CheckpointInfo& info, int64_t keep_last);

// Steps of the complete checkpoints (those with a JSON) in `dir`, ascending; none if the
// directory does not exist.
std::vector<int64_t> checkpoint_steps(const std::string& dir);

// The checkpoint JSON that `--resume ARG` means: "auto" is the newest in `dir` ("" when
// there is none: a fresh start); a directory is its newest (Error if none); a step-S.json,
// step-S.safetensors or step-S.optimizer.safetensors path is that checkpoint (Error if its
// JSON is missing). Anything else is an Error saying what is accepted.
std::string checkpoint_resolve(const std::string& arg, const std::string& dir);

// Parses and checks a checkpoint's JSON held in memory; `name` (its path) starts every
// message. Throws dpt::Error with one line for malformed JSON, another format or version,
// a missing key, a value of the wrong type or range, a file name that is not a bare name
// beside the JSON, or a malformed generator state. Reads nothing else.
CheckpointRecord checkpoint_parse_json(std::string_view text, const std::string& name);

// Reads the checkpoint, checks it (checkpoint_parse_json), the model and optimizer names
// against `objects`, and every tensor's name, dtype and shape in both tensor files, then
// copies the tensors and RNG states into `objects`. With an EMA but no EMA state in the
// checkpoint, the EMA restarts from the loaded weights. A sharded optimizer keeps its part
// of the whole state the file holds (Optimizer::state_for_load / state_loaded), so a
// checkpoint resumes with or without sharding and at another world size. Throws dpt::Error
// with one line naming the file, the key or tensor, and what was expected. `read` gives a
// file's bytes (RunControl passes one that reads on rank 0 and hands the bytes to every rank).
CheckpointRecord checkpoint_load(const std::string& json_path, const TrainingObjects& objects,
                                 const FileReader& read = read_file);

// Loads a model file (a checkpoint's step-S.safetensors, a run's model.safetensors, or a
// PyTorch state dict saved as safetensors) into `model`: every parameter and buffer by
// name, shape and dtype, checked before anything is copied; PyTorch's batch-norm
// "num_batches_tracked" counters, which dpt does not keep, are ignored.
void model_load_weights(const std::string& path, nn::Module& model, const std::string& model_name);

// Keeps the lines of a metrics.jsonl whose "epoch" is at most `epochs` (the epochs a
// resumed checkpoint had finished), so a resumed run does not list an epoch twice.
// Nothing happens when the file does not exist.
void metrics_keep_epochs(const std::string& path, int64_t epochs);

}  // namespace dpt::io
