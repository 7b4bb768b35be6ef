// Micro-benchmark of the oneDNN-backed ops on the mnist_cnn layers at batch 128: forward
// and backward of each, through the ops and autograd as training runs them, in ms per
// call and GFLOP/s (GB/s for pooling). docs/performance.md: PyTorch takes 127 ms a step.
//   bench_kernels [threads=2] [reps=50]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "core/rng.h"
#include "core/threading.h"
#include "ops/conv.h"
#include "ops/linear.h"
#include "ops/pool.h"
#include "tools/bench/median_ms.h"

using namespace dpt;

namespace {

Tensor random(const Shape& shape, uint64_t seed, bool requires_grad = false) {
  Tensor t = Tensor::empty(shape);
  Rng(seed).fill_uniform(t, -1.0f, 1.0f);
  t.set_requires_grad(requires_grad);
  return t;
}

struct Layer {
  std::string name;
  std::function<Tensor()> forward;             // records the op
  double forward_work = 0, backward_work = 0;  // flops, or bytes for pooling
  bool bytes = false;
};

void run(Layer& layer, int reps, double& total) {
  double fwd = median_ms([&] { layer.forward(); }, reps);
  // The op's backward function itself, as the engine calls it: no leaf accumulation
  // (in training these inputs are activations, not leaves).
  Tensor out = layer.forward();
  Tensor g = random(out.shape(), 99);
  const autograd::BackwardFn& backward = out.grad_fn()->backward;
  double bwd = median_ms([&] { backward(g); }, reps);
  total += fwd + bwd;
  const char* unit = layer.bytes ? "GB/s" : "GFLOP/s";
  std::printf("%-34s fwd %7.3f ms %7.1f %-7s  bwd %7.3f ms %7.1f %s\n", layer.name.c_str(), fwd,
              layer.forward_work / fwd / 1e6, unit, bwd, layer.backward_work / bwd / 1e6, unit);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  int reps = argc > 2 ? std::atoi(argv[2]) : 50;
  threads_set(threads);
  const int64_t n = 128;
  std::printf("bench_kernels: mnist_cnn layers, batch %lld, %d threads, median of %d\n",
              static_cast<long long>(n), threads_get(), reps);

  Tensor x1 = random({n, 1, 28, 28}, 1);  // data: needs no gradient
  Tensor w1 = random({32, 1, 3, 3}, 2, true), b1 = random({32}, 3, true);
  Tensor a1 = random({n, 32, 28, 28}, 4, true);  // stands for conv1's output
  Tensor x2 = random({n, 32, 14, 14}, 5, true);
  Tensor w2 = random({64, 32, 3, 3}, 6, true), b2 = random({64}, 7, true);
  Tensor a2 = random({n, 64, 14, 14}, 8, true);
  Tensor x3 = random({n, 3136}, 9, true);
  Tensor w3 = random({128, 3136}, 10, true), b3 = random({128}, 11, true);
  Tensor x4 = random({n, 128}, 12, true);
  Tensor w4 = random({10, 128}, 13, true), b4 = random({10}, 14, true);

  auto conv_flops = [&](int64_t ic, int64_t oc, int64_t hw) { return 2.0 * n * oc * hw * hw * ic * 9; };
  std::vector<Layer> layers = {
      {"conv 1->32 3x3 p1 28x28 +relu", [&] { return conv2d(x1, w1, b1, {.padding = 1}, true); },
       conv_flops(1, 32, 28), conv_flops(1, 32, 28)},  // weights only: the input is data
      {"maxpool 2 [128,32,28,28]", [&] { return max_pool2d(a1, 2, 2); }, 4.0 * n * 32 * (28 * 28 + 14 * 14),
       4.0 * n * 32 * (28 * 28 + 14 * 14), true},
      {"conv 32->64 3x3 p1 14x14 +relu", [&] { return conv2d(x2, w2, b2, {.padding = 1}, true); },
       conv_flops(32, 64, 14), 2 * conv_flops(32, 64, 14)},
      {"maxpool 2 [128,64,14,14]", [&] { return max_pool2d(a2, 2, 2); }, 4.0 * n * 64 * (14 * 14 + 7 * 7),
       4.0 * n * 64 * (14 * 14 + 7 * 7), true},
      {"linear 3136->128 +relu", [&] { return linear(x3, w3, b3, true); }, 2.0 * n * 3136 * 128,
       4.0 * n * 3136 * 128},
      {"linear 128->10", [&] { return linear(x4, w4, b4); }, 2.0 * n * 128 * 10, 4.0 * n * 128 * 10},
  };
  double total = 0;
  for (Layer& layer : layers) run(layer, reps, total);
  std::printf("%-34s %.3f ms forward+backward for these layers (PyTorch 1.13 step: 127 ms)\n", "total",
              total);
  return 0;
}
