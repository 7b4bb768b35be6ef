// Pipeline stages: each rank one stage of a registered model (dist::Pipeline), a fixed
// synthetic batch, SGD with momentum. For each schedule (GPipe, 1F1B) and micro-batch count
// M dividing the batch, rank 0 prints per stage the forward+backward time a step, the time
// it waited (idle), the measured bubble idle / step against (S - 1) / (M + S - 1), and the
// activation memory: the most host memory the step held above what it started with.
//   mpirun -np S bench_pipeline [model] [batch] [steps] [threads]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/storage.h"
#include "core/threading.h"
#include "comm/dist.h"
#include "io/config.h"
#include "parallel/pipeline.h"
#include "models/registry.h"
#include "ops/loss.h"
#include "optim/sgd.h"

using namespace dpt;

int main(int argc, char** argv) {
  const std::string model_name = argc > 1 ? argv[1] : "resnet20";
  const int64_t batch = argc > 2 ? std::stoll(argv[2]) : 64;
  const int steps = argc > 3 ? std::stoi(argv[3]) : 10;
  const int threads = argc > 4 ? std::stoi(argv[4]) : 1;
  try {
    const dist::InitInfo& world = dist::init();
    threads_set(threads);
    const int S = world.world_size, s = world.rank;
    const int64_t c = model_name == "mnist_cnn" || model_name == "lenet5" || model_name == "mlp" ? 1 : 3;
    const int64_t hw = c == 1 ? 28 : 32;
    YAML::Node node;
    node["name"] = model_name;
    Tensor x = Tensor::empty({batch, c, hw, hw});
    Rng(1).fill_normal(x, 0.0f, 1.0f);
    std::vector<int64_t> y(batch);
    for (int64_t i = 0; i < batch; ++i) y[i] = i % 10;
    const Tensor labels = Tensor::from_vector(y, {batch});
    if (s == 0)
      std::printf("%s, batch %lld, %d stages, %d steps, %d threads per rank\n", model_name.c_str(),
                  static_cast<long long>(batch), S, steps, threads);

    for (auto schedule : {dist::PipelineSchedule::gpipe, dist::PipelineSchedule::one_f_one_b}) {
      for (int m : {1, 2, 4, 8, 16}) {
        if (batch % m != 0) continue;
        auto model = models::build_model(node, {c, hw, hw, 10, 0});
        auto stage = nn::split_stage(*model, S, s);
        model.reset();
        dist::Pipeline pipeline(stage, dist::world(),
                                [](const Tensor& o, const Tensor& t) { return cross_entropy(o, t); },
                                {.micro_batches = m, .schedule = schedule});
        optim::Sgd sgd(optim::param_groups(*stage, 5e-4f, false), {0.9f, true});
        double peak = 0;  // bytes
        auto step = [&] {
          sgd.zero_grad();
          const size_t before = host_memory_stats().allocated_bytes;
          host_memory_reset_peak();
          dist::PipelineStepStats stats = pipeline.train_step(x, labels);
          peak = std::max(peak, static_cast<double>(host_memory_stats().peak_allocated_bytes - before));
          sgd.step(0.01f);
          return stats;
        };
        for (int i = 0; i < 3; ++i) step();
        dist::world()->barrier()->wait();
        double compute = 0, idle = 0, total = 0;
        for (int i = 0; i < steps; ++i) {
          dist::PipelineStepStats stats = step();
          compute += stats.compute_ms;
          idle += stats.idle_ms;
          total += stats.step_ms;
        }
        std::vector<float> mine = {static_cast<float>(compute / steps), static_cast<float>(idle / steps),
                                   static_cast<float>(total / steps), static_cast<float>(peak / 1048576.0)};
        Tensor all = Tensor::empty({4 * S});
        dist::world()->all_gather(all, Tensor::from_vector(mine, {4}))->wait();
        if (s != 0) continue;
        std::printf("\n%s, M = %d: bubble theory (S-1)/(M+S-1) = %.3f\n",
                    io::name_of(schedule).c_str(), m, dist::pipeline_bubble_theory(S, m));
        std::printf("  stage  compute ms  idle ms  step ms  bubble  activations MB  in flight\n");
        const float* v = all.data<float>();
        for (int r = 0; r < S; ++r)
          std::printf("  %5d  %10.1f  %7.1f  %7.1f  %6.3f  %14.1f  %9d\n", r, v[4 * r], v[4 * r + 1],
                      v[4 * r + 2], v[4 * r + 1] / v[4 * r + 2], v[4 * r + 3],
                      dist::pipeline_max_in_flight(schedule, S, r, m));
      }
    }
    dist::finalize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_pipeline: %s\n", e.what());
    return 1;
  }
  return 0;
}
