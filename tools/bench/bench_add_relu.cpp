// Micro-benchmark of the end of a ResNet BasicBlock: the fused add_relu(h, s) against the two
// ops it replaced, relu(add(h, s)), on resnet20's activations at batch 128 (channels-last, as
// the CPU network holds them). Forward, and each recorded node's backward function as the
// engine calls it; median of `reps` calls, which a shared machine disturbs less than a whole
// training step. The last line weights the three stages by their 3 blocks each: the time one
// resnet20 step spends on this part of the network.
//   bench_add_relu [threads=2] [reps=100]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "autograd/node.h"
#include "core/rng.h"
#include "core/threading.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "tools/bench/median_ms.h"

using namespace dpt;

namespace {

Tensor activation(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Rng(seed).fill_uniform(t, -1.0f, 1.0f);
  return t.channels_last().set_requires_grad(true);
}

struct Times {
  double forward = 0, backward = 0;
};

// Backward of every node `out` was made by, down to the two inputs (leaves, not run).
Times time_op(const std::function<Tensor()>& op, int reps) {
  Times t;
  t.forward = median_ms([&] { op(); }, reps);
  Tensor out = op();
  Tensor g = Tensor::empty(out.shape());
  Rng(3).fill_uniform(g, -1.0f, 1.0f);
  g = g.channels_last();  // as the convolution below would hand it back
  std::vector<autograd::Node*> chain;
  for (autograd::Node* node = out.grad_fn().get(); node && node->name != "accumulate_grad";
       node = node->next[0].get())
    chain.push_back(node);
  t.backward = median_ms(
      [&] {
        Tensor grad = g;
        for (autograd::Node* node : chain) grad = node->backward(grad)[0];
      },
      reps);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  int reps = argc > 2 ? std::atoi(argv[2]) : 100;
  threads_set(threads);
  std::printf("bench_add_relu: resnet20 block outputs, batch 128, channels-last, %d threads, median of %d\n",
              threads_get(), reps);
  std::printf("%-20s %-15s %9s %9s %9s\n", "shape", "op", "fwd ms", "bwd ms", "fwd GB/s");
  Times fused_step, composed_step;
  for (Shape shape : {Shape{128, 16, 32, 32}, Shape{128, 32, 16, 16}, Shape{128, 64, 8, 8}}) {
    Tensor h = activation(shape, 1), s = activation(shape, 2);
    double mb = static_cast<double>(h.numel()) * sizeof(float) / 1e6;
    Times fused = time_op([&] { return add_relu(h, s); }, reps);
    Times composed = time_op([&] { return relu(add(h, s)); }, reps);
    // Forward traffic: read h and s, write out; the two ops also write and read the sum.
    std::printf("%-20s %-15s %9.3f %9.3f %9.1f\n", shape_str(shape).c_str(), "add_relu", fused.forward,
                fused.backward, 3 * mb / fused.forward);
    std::printf("%-20s %-15s %9.3f %9.3f %9.1f\n", "", "relu(add)", composed.forward, composed.backward,
                5 * mb / composed.forward);
    fused_step.forward += 3 * fused.forward, fused_step.backward += 3 * fused.backward;
    composed_step.forward += 3 * composed.forward, composed_step.backward += 3 * composed.backward;
  }
  std::printf(
      "per resnet20 step (9 blocks): add_relu %.2f ms (fwd %.2f + bwd %.2f), relu(add) %.2f ms "
      "(fwd %.2f + bwd %.2f)\n",
      fused_step.forward + fused_step.backward, fused_step.forward, fused_step.backward,
      composed_step.forward + composed_step.backward, composed_step.forward, composed_step.backward);
  return 0;
}
