#include "train/metrics.h"

#include <filesystem>

#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/json.h"

namespace dpt::train {

void metrics_start(const io::Config& config, bool resumed, int64_t epochs_done) {
  const std::string& dir = config.output.dir;
  std::filesystem::create_directories(dir);
  if (!resumed) std::filesystem::remove(dir + "/metrics.jsonl");
  io::metrics_keep_epochs(dir + "/metrics.jsonl", epochs_done);
  io::write_file_atomic(dir + "/config.yaml", {io::config_to_yaml(config)});
}

void metrics_add_epoch(const std::string& dir, const EpochMetrics& m) {
  io::JsonOut line = {{"epoch", m.epoch},
                      {"train_loss", m.train_loss},
                      {"test_loss", m.test_loss},
                      {"test_acc", m.test_acc},
                      {"images_per_sec", m.images_per_sec},
                      {"epoch_time_s", m.epoch_time_s},
                      {"elapsed_s", m.elapsed_s},
                      {"lr", m.lr}};
  io::append_line(dir + "/metrics.jsonl", io::json_text(io::json_rounded(m.phases.add_to(line))));
}

void summary_write(const std::string& dir, const RunSummary& s) {
  io::JsonOut summary = {{"final_test_acc", s.final_test_acc},
                         {"best_test_acc", s.best_test_acc},
                         {"total_time_s", s.total_time_s},
                         {"images_per_sec", s.images_per_sec},
                         {"world_size", s.world_size},
                         {"global_batch", s.global_batch},
                         {"model", s.model},
                         {"params", s.params},
                         {"skipped_steps", s.skipped_steps},
                         {"optimizer_state_bytes", s.optimizer_state_bytes},
                         {"device", s.device},
                         {"collectives_per_step", s.traffic.collectives},
                         {"bytes_per_step", s.traffic.bytes}};
  if (!s.ranks.is_null()) summary.update(s.ranks);
  io::write_file_atomic(dir + "/summary.json",
                        {io::json_text(io::json_rounded(s.phases.add_to(summary)), 2) + "\n"});
}

}  // namespace dpt::train
