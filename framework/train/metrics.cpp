#include "train/metrics.h"

#include <filesystem>

#include "io/atomic_file.h"
#include "io/checkpoint.h"

namespace dpt::train {

void metrics_start(const io::Config& config, bool resumed, int64_t epochs_done) {
  const std::string& dir = config.output.dir;
  std::filesystem::create_directories(dir);
  if (!resumed) std::filesystem::remove(dir + "/metrics.jsonl");
  io::metrics_keep_epochs(dir + "/metrics.jsonl", epochs_done);
  io::write_file_atomic(dir + "/config.yaml", {io::config_to_yaml(config)});
}

void metrics_add_epoch(const std::string& dir, io::JsonOut line, const profile::StepPhases& phases) {
  io::append_line(dir + "/metrics.jsonl", io::json_text(io::json_rounded(phases.add_to(line))));
}

void summary_write(const std::string& dir, io::JsonOut summary, const profile::StepPhases& phases) {
  io::write_file_atomic(dir + "/summary.json",
                        {io::json_text(io::json_rounded(phases.add_to(summary)), 2) + "\n"});
}

}  // namespace dpt::train
