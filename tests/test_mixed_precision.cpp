// The parts of mixed precision and channels-last that run without a GPU: the `precision`
// and `channels_last` config keys and their errors, train and bench_train turning bf16 and
// channels-last away on the CPU (one line, exit 2), the ops refusing bf16 CPU tensors, and
// the layer machinery itself (nn::Compute, the weight cache, the cast op's gradient) run on
// the CPU in f32 channels-last, where a model must train exactly as its plain twin — a
// weight cache that missed an optimizer step or a checkpoint load would not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "error_of.h"
#include "gradcheck.h"
#include "inputs.h"
#include "io/atomic_file.h"
#include "io/config.h"
#include "kernel_check.h"
#include "models/registry.h"
#include "ops/cast.h"
#include "ops/conv.h"
#include "ops/loss.h"
#include "optim/sgd.h"
#include "temp_dir.h"

using namespace dpt;
using dpt::testing::error_of;
using dpt::testing::random_labels;
using dpt::testing::random_tensor;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

class MixedPrecision : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    const std::string path = dir_.file("c.yaml");
    std::ofstream(path) << text;
    return path;
  }
  // Exit code and stderr of a command.
  std::pair<int, std::string> run(const std::string& command) {
    int status = std::system((command + " >/dev/null 2>" + dir_.file("err")).c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, io::read_file(dir_.file("err"))};
  }
  std::string binary(const char* name) {
    const char* build = std::getenv("DPT_BUILD_DIR");
    return (fs::path(build ? build : ".") / name).string();
  }

  dpt::testing::TempDir dir_{"dpt_mixed"};
};

const char* kBase =
    "model: {name: mnist_cnn}\ndataset: {name: synthetic, shape: [1, 8, 8], classes: 4, size: 64}\n";

TEST_F(MixedPrecision, ConfigKeys) {
  io::Config defaults = io::load_config(write(kBase));
  EXPECT_EQ(defaults.precision, io::Precision::fp32);
  EXPECT_FALSE(defaults.channels_last);
  io::Config c = io::load_config(write(std::string(kBase) + "precision: bf16\nchannels_last: true\n"));
  EXPECT_EQ(c.precision, io::Precision::bf16);
  EXPECT_TRUE(c.channels_last);
  // The resolved file written into the run directory reads back the same.
  io::Config again = io::load_config(write(io::config_to_yaml(c)));
  EXPECT_EQ(again.precision, io::Precision::bf16);
  EXPECT_TRUE(again.channels_last);
  EXPECT_THAT(error_of([&] { io::load_config(write(std::string(kBase) + "precision: fp16\n")); }),
              HasSubstr("key 'precision': unknown precision 'fp16' (expected one of: fp32, bf16)"));
  EXPECT_THAT(error_of([&] { io::load_config(write(std::string(kBase) + "channels_last: maybe\n")); }),
              HasSubstr("channels_last"));
  EXPECT_THAT(error_of([&] { io::load_config(write(kBase), {"precision=bf32"}); }),
              HasSubstr("unknown precision 'bf32'"));
}

TEST_F(MixedPrecision, TrainTurnsBf16AndChannelsLastAwayOnTheCpu) {
  std::string config =
      std::string(kBase) + "epochs: 1\nbatch_size: 16\nthreads: 1\noutput: {dir: " + dir_.file("run") + "}\n";
  auto [code, err] = run(binary("train") + " " + write(config + "precision: bf16\n"));
  EXPECT_EQ(code, 2) << err;
  EXPECT_THAT(err, HasSubstr("precision: bf16 needs a CUDA device, but this run trains on cpu"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  std::tie(code, err) = run(binary("train") + " " + write(config + "channels_last: true\n"));
  EXPECT_EQ(code, 2) << err;
  EXPECT_THAT(err, HasSubstr("channels_last: true needs a CUDA device"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST_F(MixedPrecision, BenchTrainOptions) {
  auto [code, err] = run(binary("bench_train") + " mnist_cnn 8 1 1 --warmup 0 --device cpu --precision fp32");
  EXPECT_EQ(code, 0) << err;
  std::tie(code, err) = run(binary("bench_train") + " mnist_cnn 8 1 1 --precision bf16");
  EXPECT_EQ(code, 2);
  EXPECT_THAT(err, HasSubstr("--precision bf16 and --channels-last need --device cuda"));
  std::tie(code, err) = run(binary("bench_train") + " mnist_cnn 8 1 1 --precision fp16");
  EXPECT_EQ(code, 2);
  EXPECT_THAT(err, HasSubstr("--precision: expected fp32 or bf16, got 'fp16'"));
  std::tie(code, err) = run(binary("bench_train") + " mnist_cnn 8 1 1 --cuda-graph");
  EXPECT_EQ(code, 2);
  EXPECT_THAT(err, HasSubstr("unknown option --cuda-graph"));
}

TEST_F(MixedPrecision, Bf16IsCudaOnly) {
  Tensor x = random_tensor({1, 2, 4, 4}, 1);
  EXPECT_EQ(error_of([&] { cast(x, DType::bf16); }),
            "cast: bf16 tensors live on CUDA devices only (the CPU kernels are f32)");
  // Only the CUDA kernels take bf16; the CPU's refuse it alike in both builds.
  const std::string conv_refusal = "conv2d: bf16 tensors run on CUDA devices only (the CPU kernels are f32)";
  Tensor xb = Tensor::empty({1, 2, 4, 4}, DType::bf16), wb = Tensor::empty({3, 2, 3, 3}, DType::bf16);
  EXPECT_EQ(error_of([&] { conv2d(xb, wb, Tensor()); }), conv_refusal);
  EXPECT_EQ(error_of([&] {
              conv2d(xb, random_tensor({3, 2, 3, 3}, 2), Tensor());
            }),
            "conv2d: inputs of different dtypes (bf16 and f32); cast them to one first");
}

TEST_F(MixedPrecision, CastGradientReturnsInTheInputsLayout) {
  Tensor x = random_tensor({2, 3, 4, 5}, 3).set_requires_grad(true);
  Tensor y = cast(x, DType::f32, MemoryFormat::channels_last);
  EXPECT_TRUE(y.is_channels_last());
  EXPECT_EQ(y.to_vector(), x.to_vector());
  EXPECT_TRUE(cast(x, DType::f32).is_same(x)) << "nothing to change: x itself";
  Tensor g = random_tensor({2, 3, 4, 5}, 4).channels_last();
  y.backward(g);
  EXPECT_TRUE(x.grad().is_contiguous());
  EXPECT_EQ(x.grad().to_vector(), g.to_vector());
}

// A model and its twin in f32 channels-last (cast inputs, weight caches) on the CPU: equal
// losses and gradients for three SGD steps and after a checkpoint-style load — only if
// every cached weight was remade after each write.
TEST_F(MixedPrecision, WeightCacheFollowsEveryWrite) {
  const models::ModelSpec spec{1, 12, 12, 10, 0};
  auto plain = models::build_model(YAML::Load("{name: mnist_cnn}"), spec);
  auto cached = models::build_model(YAML::Load("{name: mnist_cnn}"), spec);
  cached->set_compute({DType::f32, true});
  optim::Sgd sgd_plain(optim::param_groups(*plain, 5e-4f, false), {0.9f, true});
  optim::Sgd sgd_cached(optim::param_groups(*cached, 5e-4f, false), {0.9f, true});
  Tensor x = random_tensor({8, 1, 12, 12}, 5), labels = random_labels(8, 10, 6);
  auto step = [&](nn::Module& m, optim::Sgd& sgd) {
    sgd.zero_grad();
    Tensor loss = cross_entropy(m(x), labels);
    loss.backward();
    return loss.item();
  };
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    float a = step(*plain, sgd_plain), b = step(*cached, sgd_cached);
    EXPECT_FLOAT_EQ(a, b);
    auto pp = plain->named_parameters(), cp = cached->named_parameters();
    for (size_t k = 0; k < pp.size(); ++k) {
      EXPECT_EQ(cp[k].second.grad().dtype(), DType::f32);
      EXPECT_TRUE(cp[k].second.grad().is_contiguous()) << cp[k].first;
      dpt::testing::expect_close(cp[k].second.grad(), dpt::testing::to_double(pp[k].second.grad()),
                                 "gradient of " + pp[k].first, 1e-6, 1e-5);
    }
    sgd_plain.step(0.1f);
    sgd_cached.step(0.1f);
  }
  // A load replaces every weight: both now hold a third model's.
  auto third = models::build_model(YAML::Load("{name: mnist_cnn}"), {1, 12, 12, 10, 7});
  plain->load_state_dict(third->state_dict());
  cached->load_state_dict(third->state_dict());
  Tensor a = (*plain)(x), b = (*cached)(x);
  dpt::testing::expect_close(b, dpt::testing::to_double(a), "logits after a load", 1e-6, 1e-5);
}

}  // namespace
