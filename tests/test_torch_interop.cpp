// dpt's model files in PyTorch and PyTorch's in dpt: the model.safetensors a training run
// writes loads into PyTorch's mnist_cnn (tools/bench/torch_train.py) and gives dpt's outputs,
// and a PyTorch state dict written in the same format (tests/torch_interop.py has its own
// numpy reader and writer) loads into dpt and gives PyTorch's outputs. Skipped with a
// message where /usr/bin/python3 cannot import torch.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/rng.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/registry.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using namespace dpt;

namespace {

int shell(const std::string& command) {
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// Inference outputs of a fresh dpt mnist_cnn holding the weights in `path`.
Tensor dpt_outputs(const std::string& path, const Tensor& x, uint64_t init_seed) {
  nn::ModulePtr model = models::build_model(YAML::Load("{name: mnist_cnn}"), {1, 28, 28, 10, init_seed});
  io::model_load_weights(path, *model, "mnist_cnn");
  model->eval();
  return (*model)(x);
}

void expect_close(const Tensor& got, const Tensor& want) {
  std::vector<float> g = got.to_vector(), w = want.to_vector();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], w[i], 1e-4 + 1e-4 * std::fabs(w[i])) << "output " << i;
}

}  // namespace

TEST(TorchInterop, SafetensorsGoBothWaysWithTheSameOutputs) {
  if (shell("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy (apt-get install python3-torch)";
  const fs::path source = env_or("DPT_SOURCE_DIR", "."), build = env_or("DPT_BUILD_DIR", ".");
  dpt::testing::TempDir dir("dpt_torch_interop");

  // A model trained a few steps by dpt's train: its final model.safetensors.
  std::ofstream(dir.file("c.yaml"))
      << "model: {name: mnist_cnn}\n"
         "dataset: {name: synthetic, shape: [1, 28, 28], classes: 10, size: 256}\n"
         "epochs: 1\nbatch_size: 32\nthreads: 1\nmax_steps_per_epoch: 3\n"
         "output: {dir: "
      << dir.file("run") << "}\n";
  ASSERT_EQ(shell((build / "train").string() + " " + dir.file("c.yaml") + " >/dev/null"), 0);
  const std::string trained = dir.file("run/model.safetensors");

  Tensor x = Tensor::empty({5, 1, 28, 28});
  Rng(11).fill_normal(x, 0, 1);
  io::safetensors_write(dir.file("dpt_io.safetensors"),
                        {{"input", x}, {"output", dpt_outputs(trained, x, 99)}});
  const std::string python = "/usr/bin/python3 " + (source / "tests/torch_interop.py").string() + " " +
                             trained + " " + dir.file("dpt_io.safetensors") + " " +
                             dir.file("torch_model.safetensors") + " " + dir.file("torch_io.safetensors");
  ASSERT_EQ(shell("OMP_NUM_THREADS=1 " + python), 0) << "the PyTorch side failed (its message is above)";

  // PyTorch's freshly initialised weights in dpt give PyTorch's outputs.
  io::SafetensorsFile torch_io = io::safetensors_read(dir.file("torch_io.safetensors"));
  Tensor torch_out = torch_io.tensor(*torch_io.view.find("output"));
  expect_close(dpt_outputs(dir.file("torch_model.safetensors"), x, 7), torch_out);
  // And they are not what dpt's own initialisation would give (the load did something).
  nn::ModulePtr fresh = models::build_model(YAML::Load("{name: mnist_cnn}"), {1, 28, 28, 10, 7});
  fresh->eval();
  EXPECT_GT(std::fabs((*fresh)(x).to_vector()[0] - torch_out.to_vector()[0]), 1e-3);
}
