// What checkpoints cost: saving (model file, momentum file, JSON, each fsynced and renamed)
// and loading a checkpoint of mnist_cnn, ResNet-20 and ResNet-18 with SGD momentum, and the
// per-step check that all gradients are finite. Best of `reps` for saves and loads.
//   bench_checkpoint [DIR=/tmp/dpt_bench_checkpoint] [reps=3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "io/checkpoint.h"
#include "models/registry.h"
#include "optim/nonfinite.h"
#include "optim/sgd.h"

using namespace dpt;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp/dpt_bench_checkpoint";
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  std::printf("%-10s %10s %12s %9s %9s %14s\n", "model", "params", "files MB", "save ms", "load ms",
              "finite check us");
  for (const char* name : {"mnist_cnn", "resnet20", "resnet18"}) {
    const bool mnist = std::string(name) == "mnist_cnn";
    nn::ModulePtr model = models::build_model(YAML::Load(std::string("{name: ") + name + "}"),
                                              {mnist ? 1 : 3, mnist ? 28 : 32, mnist ? 28 : 32, 10, 0});
    optim::Sgd sgd(optim::param_groups(*model, 0, true), {0.9f, true});
    const io::TrainingObjects objects{*model, name, sgd, "sgd", nullptr};
    io::CheckpointInfo info;
    info.batch_size = 128;
    double save = 1e30, load = 1e30;
    std::string json;
    for (int i = 1; i <= reps; ++i) {
      info.progress.step = i;
      auto start = Clock::now();
      json = io::checkpoint_save(dir, objects, sgd.state_for_save(), info, 1);
      save = std::min(save, ms_since(start));
      start = Clock::now();
      io::checkpoint_load(json, objects);
      load = std::min(load, ms_since(start));
    }
    double mb = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      mb += static_cast<double>(e.file_size()) / 1e6;
    for (const Tensor& p : model->parameters()) p.set_grad(Tensor::zeros(p.shape()));
    optim::NonfiniteGuard guard(*model, sgd, false, false);
    const int checks = 200;
    auto start = Clock::now();
    for (int i = 0; i < checks; ++i) guard.step_finite(Tensor());
    std::printf("%-10s %10lld %12.1f %9.1f %9.1f %14.1f\n", name,
                static_cast<long long>(model->parameter_count()), mb, save, load,
                ms_since(start) * 1000 / checks);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
