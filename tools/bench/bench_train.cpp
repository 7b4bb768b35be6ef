// Training throughput of a registered model on one fixed synthetic batch: forward,
// cross-entropy, backward, SGD (momentum 0.9, Nesterov, weight decay 5e-4). Prints one
// JSON line, the same fields as torch_train.py, so vs_torch.sh can compare them.
//   bench_train [model] [batch] [threads] [steps] [channels height width] [--cuda-graphs]
// --cuda-graphs: the step on cuda:0, captured as one CUDA graph after 3 eager steps and
// replayed (optim/graphed_train_step.h); the loss is read back after every step.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/threading.h"
#include "models/registry.h"
#include "ops/loss.h"
#include "optim/graphed_train_step.h"
#include "optim/sgd.h"

using namespace dpt;

namespace {

// Removes --cuda-graphs from the arguments; true if it was there.
bool take_cuda_graphs_flag(int& argc, char** argv) {
  bool found = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cuda-graphs") == 0)
      found = true;
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  const bool cuda_graphs = take_cuda_graphs_flag(argc, argv);
  std::string model_name = argc > 1 ? argv[1] : "mnist_cnn";
  int64_t batch = argc > 2 ? std::stoll(argv[2]) : 128;
  int threads = argc > 3 ? std::stoi(argv[3]) : 0;
  int steps = argc > 4 ? std::stoi(argv[4]) : 30;
  int64_t c = argc > 5 ? std::stoll(argv[5]) : 1, h = argc > 6 ? std::stoll(argv[6]) : 28,
          w = argc > 7 ? std::stoll(argv[7]) : 28;
  try {
    threads_set(threads);
    YAML::Node node;
    node["name"] = model_name;
    auto model = models::build_model(node, {c, h, w, 10, 0});
    optim::Sgd sgd(optim::param_groups(*model, 5e-4f, false), {0.9f, true});
    Tensor x = Tensor::empty({batch, c, h, w});
    Rng(1).fill_normal(x, 0.0f, 1.0f);
    std::vector<int64_t> y(batch);
    for (int64_t i = 0; i < batch; ++i) y[i] = i % 10;
    Tensor labels = Tensor::from_vector(y, {batch});
    std::unique_ptr<optim::GraphedTrainStep> graphed;
    if (cuda_graphs) {
      model->to(Device::cuda(0));  // before the optimizer's first step: its state follows
      graphed = std::make_unique<optim::GraphedTrainStep>(*model, *model, sgd, nullptr, x.shape(),
                                                          optim::GraphedTrainOptions{.classes = 10});
    }
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
    for (int i = 0; i < 5; ++i) step();  // warm-up: primitives created, memory settled
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf(
        "{\"framework\": \"dpt\", \"model\": \"%s\", \"batch\": %lld, \"threads\": %d, \"ms_per_step\": "
        "%.2f, "
        "\"images_per_sec\": %.1f, \"peak_rss_mb\": %.1f, \"cuda_graphs\": %s}\n",
        model_name.c_str(), static_cast<long long>(batch), threads_get(), seconds / steps * 1e3,
        static_cast<double>(batch) * steps / seconds, usage.ru_maxrss / 1024.0,
        cuda_graphs ? "true" : "false");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
