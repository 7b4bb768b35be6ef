// What a run leaves in output.dir for people and tools to read: config.yaml (the resolved
// configuration), metrics.jsonl (one JSON line per epoch) and summary.json (at the end).
// Rank 0 writes them; each is replaced whole (io/atomic_file.h), so a crash never leaves
// half a line.
#pragma once

#include <string>

#include "io/config.h"
#include "io/json.h"
#include "profile/step_phases.h"

namespace dpt::train {

// Makes output.dir, writes config.yaml there, and leaves in metrics.jsonl the lines of the
// first `epochs_done` epochs: those a resumed run (`resumed`) keeps; a fresh run's earlier
// file is removed. Throws dpt::Error naming a file that cannot be written.
void metrics_start(const io::Config& config, bool resumed, int64_t epochs_done);

// Appends an epoch's line to `dir`/metrics.jsonl: `line` (epoch from 1, train_loss,
// test_loss, test_acc, images_per_sec, epoch_time_s for training and evaluation,
// elapsed_s since the run or its resumption started, lr of the epoch's last step), then
// `phases` (mean per step, over the ranks), rounded.
void metrics_add_epoch(const std::string& dir, io::JsonOut line, const profile::StepPhases& phases);

// Writes `dir`/summary.json: `summary` (the run's totals; "ranks" and "stragglers" from
// profile/straggler.h), then `phases` (mean per step after the warm-up steps), rounded.
void summary_write(const std::string& dir, io::JsonOut summary, const profile::StepPhases& phases);

}  // namespace dpt::train
