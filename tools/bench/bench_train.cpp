// Training throughput of a registered model on one fixed synthetic batch: forward,
// cross-entropy, backward, SGD (momentum 0.9, Nesterov, weight decay 5e-4). Prints one
// JSON line, the same fields as torch_train.py, so vs_torch.sh and gpu_check.sh can
// compare them.
//   bench_train [model] [batch] [threads] [steps] [channels height width]
//               [--device cpu|cuda] [--precision fp32|bf16] [--channels-last] [--warmup N]
//               [--cuda-graphs]
// --cuda-graphs (with --device cuda): the step captured as one CUDA graph after 3 eager
// steps and replayed (optim/graphed_train_step.h); the loss is read back after every step.
// On CUDA the batch lives on the device, the timed steps lie between two CUDA events on the
// compute stream (the warm-up steps, which create cuDNN plans and fill the caching
// allocator, are before the first), and the host waits for the last event.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/threading.h"
#include "io/json.h"
#include "models/registry.h"
#include "ops/loss.h"
#include "optim/graphed_train_step.h"
#include "optim/sgd.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/context.h"
#include "backend/cuda/device.h"
#endif

using namespace dpt;

namespace {

struct Options {
  std::string model = "mnist_cnn";
  int64_t batch = 128;
  int threads = 0;
  int steps = 30;
  int64_t c = 1, h = 28, w = 28;
  Device device = Device::cpu();
  std::string precision = "fp32";
  bool channels_last = false;
  int warmup = 5;
  bool cuda_graphs = false;
};

// Positional arguments in their historical order, then --flags anywhere.
Options parse(int argc, char** argv) {
  Options o;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      DPT_CHECK(i + 1 < argc) << a << ": expected a value";
      return argv[++i];
    };
    if (a == "--device") {
      o.device = Device::parse(value());
    } else if (a == "--precision") {
      o.precision = value();
      DPT_CHECK(o.precision == "fp32" || o.precision == "bf16")
          << "--precision: expected fp32 or bf16, got '" << o.precision << "'";
    } else if (a == "--channels-last") {
      o.channels_last = true;
    } else if (a == "--cuda-graphs") {
      o.cuda_graphs = true;
    } else if (a == "--warmup") {
      o.warmup = std::stoi(value());
    } else {
      DPT_CHECK(a.rfind("--", 0) != 0)
          << "unknown option " << a
          << " (expected --device, --precision, --channels-last, --warmup, --cuda-graphs)";
      positional.push_back(a);
    }
  }
  size_t n = positional.size();
  if (n > 0) o.model = positional[0];
  if (n > 1) o.batch = std::stoll(positional[1]);
  if (n > 2) o.threads = std::stoi(positional[2]);
  if (n > 3) o.steps = std::stoi(positional[3]);
  if (n > 4) o.c = std::stoll(positional[4]);
  if (n > 5) o.h = std::stoll(positional[5]);
  if (n > 6) o.w = std::stoll(positional[6]);
  DPT_CHECK(o.batch > 0 && o.steps > 0 && o.warmup >= 0) << "batch and steps must be positive, warmup >= 0";
  DPT_CHECK(!o.cuda_graphs || o.device.is_cuda()) << "--cuda-graphs needs --device cuda";
  return o;
}

// Seconds taken by `steps` calls of `step` after `warmup` untimed ones; on CUDA measured by
// events on the compute stream.
template <class Step>
double time_steps(const Options& o, Step&& step) {
  for (int i = 0; i < o.warmup; ++i) step();
#ifdef DPT_WITH_CUDA
  if (o.device.is_cuda()) {
    cuda::DeviceGuard guard(o.device.index);
    const cuda::Stream& stream = cuda::device_context(o.device.index).stream();
    cuda::Event start(true), stop(true);
    stream.synchronize();
    start.record(stream);
    for (int i = 0; i < o.steps; ++i) step();
    stop.record(stream);
    stop.synchronize();
    return stop.elapsed_ms(start) / 1e3;
  }
#endif
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) step();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    threads_set(o.threads);
    YAML::Node node;
    node["name"] = o.model;
    auto model = models::build_model(node, {o.c, o.h, o.w, 10, 0});
    model->to(o.device);
    nn::Compute compute{o.precision == "bf16" ? DType::bf16 : DType::f32, o.channels_last};
    DPT_CHECK(!compute.active() || o.device.is_cuda())
        << "--precision bf16 and --channels-last need --device cuda (the CPU path is f32, laid out by "
           "oneDNN)";
    model->set_compute(compute);
    optim::Sgd sgd(optim::param_groups(*model, 5e-4f, false), {0.9f, true});
    Tensor x = Tensor::empty({o.batch, o.c, o.h, o.w});
    Rng(1).fill_normal(x, 0.0f, 1.0f);
    std::vector<int64_t> y(o.batch);
    for (int64_t i = 0; i < o.batch; ++i) y[i] = i % 10;
    Tensor labels = Tensor::from_vector(y, {o.batch});
    x = x.to(o.device);
    labels = labels.to(o.device);
    std::unique_ptr<optim::GraphedTrainStep> graphed;
    if (o.cuda_graphs)
      graphed = std::make_unique<optim::GraphedTrainStep>(*model, *model, sgd, nullptr, x.shape(),
                                                          optim::GraphedTrainOptions{.classes = 10});
    auto step = [&] {
      if (graphed) {
        graphed->run(x, labels, 0.01f);
        return;
      }
      Tensor loss = cross_entropy((*model)(x), labels);
      sgd.zero_grad();
      loss.backward();
      sgd.step(0.01f);
    };
    double seconds = time_steps(o, step);
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const io::JsonOut line = {{"framework", "dpt"},
                              {"model", o.model},
                              {"batch", o.batch},
                              {"threads", threads_get()},
                              {"device", o.device.str()},
                              {"precision", o.precision},
                              {"channels_last", o.channels_last},
                              {"cuda_graphs", o.cuda_graphs},
                              {"ms_per_step", seconds / o.steps * 1e3},
                              {"images_per_sec", static_cast<double>(o.batch) * o.steps / seconds},
                              {"peak_rss_mb", usage.ru_maxrss / 1024.0}};
    std::printf("%s\n", io::json_text(io::json_rounded(line)).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
