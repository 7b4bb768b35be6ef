#include "train_program.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "comm/dist.h"
#include "io/config.h"
#include "io/run_control.h"
#include "train/trainer.h"

namespace dpt {

int run_train_program(int argc, char** argv, io::StepHook hook) {
  const char* usage =
      "train CONFIG.yaml [--set key=value ...] [--resume PATH|auto] [--timeline TRACE.json [--timeline-steps "
      "N]] "
      "[--sync-phases]";
  std::string config_path;
  std::vector<std::string> overrides;
  train::TrainerOptions options;
  options.step_hook = std::move(hook);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf("usage: %s\n", usage);
      return 0;
    } else if (arg == "--resume" && i + 1 < argc) {
      options.resume = argv[++i];
    } else if (arg.rfind("--resume=", 0) == 0) {
      options.resume = arg.substr(9);
    } else if (arg == "--sync-phases") {
      options.sync_phases = true;
    } else if (arg == "--timeline" && i + 1 < argc) {
      options.timeline.path = argv[++i];
    } else if (arg == "--timeline-steps" && i + 1 < argc) {
      char* end = nullptr;
      options.timeline.steps = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || options.timeline.steps < 1) {
        std::fprintf(stderr, "error: --timeline-steps expects a whole number >= 1, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (arg == "--set" && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else if (arg.rfind("--set=", 0) == 0) {
      overrides.push_back(arg.substr(6));
    } else if (config_path.empty() && arg[0] != '-') {
      config_path = arg;
    } else {
      std::fprintf(stderr, "error: unexpected argument '%s' (usage: %s)\n", arg.c_str(), usage);
      return 2;
    }
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "error: no config file (usage: %s)\n", usage);
    return 2;
  }
  int code = 0;
  std::string message;
  bool failed = false;  // an exception is this rank's alone; run()'s exit codes are every rank's
  io::stop_signals_install();
  try {
    dist::init();
    code = train::Trainer(io::load_config(config_path, overrides), std::move(options)).run();
  } catch (const Error& e) {
    code = 2;
    message = e.what();
    failed = true;
  } catch (const std::exception& e) {
    code = 1;
    message = e.what();
    failed = true;
  }
  std::fflush(stdout);
  if (failed && dist::initialized() && dist::info().world_size > 1)
    dist::abort_all("error: " + message, code);
  if (failed) std::fprintf(stderr, "error: %s\n", message.c_str());
  dist::finalize();
  return code;
}

}  // namespace dpt
