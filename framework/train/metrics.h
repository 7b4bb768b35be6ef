// What a run leaves in output.dir for people and tools to read: config.yaml (the resolved
// configuration), metrics.jsonl (one JSON line per epoch) and summary.json (at the end).
// Rank 0 writes them; each is replaced whole (io/atomic_file.h), so a crash never leaves
// half a line.
#pragma once

#include <cstdint>
#include <string>

#include "io/config.h"
#include "profile/step_phases.h"

namespace dpt::train {

// One line of metrics.jsonl.
struct EpochMetrics {
  int64_t epoch = 0;  // from 1
  double train_loss = 0, test_loss = 0, test_acc = 0;
  double images_per_sec = 0;   // training images of the epoch over its training time
  double epoch_time_s = 0;     // training and evaluation
  double elapsed_s = 0;        // since the run (or its resumption) started
  double lr = 0;               // the epoch's last step's learning rate
  profile::StepPhases phases;  // mean per step, over the ranks
};

// summary.json.
struct RunSummary {
  double final_test_acc = 0, best_test_acc = 0;
  double total_time_s = 0;
  double images_per_sec = 0;  // training images over training time, for the whole run
  int world_size = 1;
  int64_t global_batch = 0;
  std::string model;
  int64_t params = 0;
  int64_t skipped_steps = 0;          // for non-finite gradients
  int64_t optimizer_state_bytes = 0;  // rank 0's: 1/N of the whole under optimizer.shard
  std::string device;
  profile::StepPhases phases;    // mean per step after the warm-up steps, over the ranks
  profile::StepTraffic traffic;  // collectives and bytes per step, the same steps, on rank 0
  // "ranks": each rank's host and median phases and work per step, the same steps;
  // "stragglers": the lines naming ranks that work 20% above the median (profile/straggler.h).
  io::JsonOut ranks;
};

// Makes output.dir, writes config.yaml there, and leaves in metrics.jsonl the lines of the
// first `epochs_done` epochs: those a resumed run (`resumed`) keeps; a fresh run's earlier
// file is removed. Throws dpt::Error naming a file that cannot be written.
void metrics_start(const io::Config& config, bool resumed, int64_t epochs_done);

// Appends `epoch`'s line to `dir`/metrics.jsonl.
void metrics_add_epoch(const std::string& dir, const EpochMetrics& epoch);

// Writes `dir`/summary.json.
void summary_write(const std::string& dir, const RunSummary& summary);

}  // namespace dpt::train
