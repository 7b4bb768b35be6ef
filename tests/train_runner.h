// Runs the train binary (DPT_BUILD_DIR/train, or train_faults with DPT_DEBUG_FAULT) on a
// config written into a fresh directory and reads back what it wrote: exit code, output,
// metrics.jsonl values, model weights.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/storage.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "temp_dir.h"

namespace dpt::testing {

namespace fs = std::filesystem;

struct TrainResult {
  int exit_code;
  std::string out, err;
};

class TrainRunner : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* build = std::getenv("DPT_BUILD_DIR");
    train_ = fs::path(build ? build : ".") / "train";
    ASSERT_TRUE(fs::exists(train_)) << train_ << " not built (DPT_BUILD_DIR)";
  }

  // With `faults` (DPT_DEBUG_FAULT's value, fault_injection.h), train_faults runs instead.
  TrainResult train(const std::string& config, const std::string& args = "", const std::string& faults = "") {
    const std::string path = dir_.file("config.yaml");
    std::ofstream(path) << config;
    const fs::path program = faults.empty() ? train_ : train_.parent_path() / "train_faults";
    EXPECT_TRUE(fs::exists(program)) << program << " not built (DPT_BUILD_DIR)";
    const std::string cmd = (faults.empty() ? "" : "DPT_DEBUG_FAULT=" + faults + " ") + program.string() +
                            " " + path + " " + args + " >" + dir_.file("out") + " 2>" + dir_.file("err");
    int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, io::read_file(dir_.file("out")),
            io::read_file(dir_.file("err"))};
  }

  // A small ResNet with batch norm, dropout-free, on synthetic 3x16x16 data: conv, BN,
  // pooling, the loss and SGD with momentum, an EMA and augmentation all take part.
  std::string config(const std::string& run, const std::string& extra = "") {
    return "model: {name: resnet_cifar, depth: 8}\n"
           "dataset: {name: synthetic, shape: [3, 16, 16], classes: 4, size: 384, augment: true}\n"
           "epochs: 2\nbatch_size: 32\neval_batch_size: 64\nthreads: 1\nema_decay: 0.9\n"
           "optimizer: {name: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 5.0e-4}\n"
           "output: {dir: " +
           dir_.file(run) + "}\n" + extra;
  }

  // metrics.jsonl's values of `key`, one per epoch.
  std::vector<double> metric(const std::string& run, const std::string& key) {
    std::vector<double> values;
    std::ifstream in(dir_.file(run) + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const io::JsonIn metrics = io::json_parse(line, "metrics.jsonl");
      if (metrics.contains(key)) values.push_back(io::json_number(metrics[key], "metrics.jsonl: " + key));
    }
    return values;
  }

  static bool have_gpu() { return device_count(DeviceType::cuda) > 0; }

  // A run's model.safetensors as (name, values), in the file's order.
  std::vector<std::pair<std::string, std::vector<float>>> weights(const std::string& run) {
    io::SafetensorsFile file = io::safetensors_read(dir_.file(run) + "/model.safetensors");
    std::vector<std::pair<std::string, std::vector<float>>> out;
    for (const io::SafetensorsEntry& e : file.view.tensors)
      out.emplace_back(e.name, file.tensor(e).to_vector());
    return out;
  }

  // Within rtol |want| + atol, element by element; batch-norm running statistics (names
  // with "running_") within rtol |want| + running_atol when that is given (>= 0).
  void expect_weights_close(const std::string& got_run, const std::string& want_run, double rtol, double atol,
                            double running_atol = -1) {
    auto got = weights(got_run), want = weights(want_run);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].first, want[i].first);
      const std::vector<float>&a = want[i].second, &b = got[i].second;
      ASSERT_EQ(a.size(), b.size()) << want[i].first;
      // Every tensor, with how many of its elements are off and the worst: one element
      // off says drift (a ReLU input across 0), all of them a systematic difference.
      const bool running = running_atol >= 0 && want[i].first.find("running_") != std::string::npos;
      const double tensor_atol = running ? running_atol : atol;
      size_t bad = 0, worst = 0;
      double worst_excess = 0;
      for (size_t k = 0; k < a.size(); ++k) {
        const double excess = std::abs(b[k] - a[k]) - (rtol * std::abs(a[k]) + tensor_atol);
        if (excess <= 0) continue;
        ++bad;
        if (excess > worst_excess) {
          worst_excess = excess;
          worst = k;
        }
      }
      EXPECT_EQ(bad, 0u) << want[i].first << ": " << bad << " of " << a.size()
                         << " elements out of tolerance; the worst, [" << worst << "], is " << b[worst]
                         << " against " << a[worst];
    }
  }

  TempDir dir_{"dpt_train_run"};
  fs::path train_;
};

}  // namespace dpt::testing
