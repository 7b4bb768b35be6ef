// Data-parallel training throughput: a registered model on a fixed synthetic batch per
// rank, wrapped in DistributedDataParallel when there are several ranks, SGD with
// momentum. Rank 0 prints one JSON line with the global images/s and the time each step
// spent waiting for gradients after backward (communication not hidden by it).
//   mpirun -np N bench_ddp [model] [batch per rank] [threads] [steps] [bucket_cap_mb]
#include <chrono>
#include <cstdio>
#include <string>

#include "core/rng.h"
#include "core/threading.h"
#include "distributed/ddp.h"
#include "distributed/dist.h"
#include "distributed/mpi_process_group.h"
#include "io/json.h"
#include "models/registry.h"
#include "ops/loss.h"
#include "optim/sgd.h"

using namespace dpt;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string model_name = argc > 1 ? argv[1] : "mnist_cnn";
  int64_t batch = argc > 2 ? std::stoll(argv[2]) : 64;
  int threads = argc > 3 ? std::stoi(argv[3]) : 1;
  int steps = argc > 4 ? std::stoi(argv[4]) : 40;
  double bucket_cap_mb = argc > 5 ? std::stod(argv[5]) : 25.0;
  try {
    const dist::InitInfo& world = dist::init();
    threads_set(threads);
    if (const char* poll = std::getenv("DPT_BENCH_POLL_US")) {  // "min,max": the comm thread's back-off
      dist::PollPolicy policy;
      std::sscanf(poll, "%d,%d", &policy.min_sleep_us, &policy.max_sleep_us);
      dynamic_cast<dist::MpiProcessGroup&>(*dist::world()).set_poll_policy(policy);
    }
    int64_t c = model_name == "mnist_cnn" || model_name == "lenet5" || model_name == "mlp" ? 1 : 3;
    int64_t hw = c == 1 ? 28 : 32;
    YAML::Node node;
    node["name"] = model_name;
    nn::ModulePtr model = models::build_model(node, {c, hw, hw, 10, 0});
    // DPT_BENCH_NO_DDP=1: the ranks train independently, to measure what sharing the machine
    // costs without any communication.
    // DPT_BENCH_SYNC_ONLY=1: no DDP, but the ranks meet once a step (a 1-element all-reduce
    // after backward), to measure what waiting for the slower rank costs by itself.
    const bool sync_only = world.world_size > 1 && std::getenv("DPT_BENCH_SYNC_ONLY");
    bool use_ddp = world.world_size > 1 && !std::getenv("DPT_BENCH_NO_DDP") && !sync_only;
    if (use_ddp)
      model = std::make_shared<dist::DistributedDataParallel>(model, dist::world(),
                                                              dist::DdpOptions{.bucket_cap_mb = bucket_cap_mb});
    optim::Sgd sgd(optim::param_groups(*model, 5e-4f, false), {0.9f, true});
    Tensor x = Tensor::empty({batch, c, hw, hw});
    Rng(1 + world.rank).fill_normal(x, 0.0f, 1.0f);
    std::vector<int64_t> y(batch);
    for (int64_t i = 0; i < batch; ++i) y[i] = (i + world.rank) % 10;
    Tensor labels = Tensor::from_vector(y, {batch});
    Tensor meet = Tensor::zeros({1});
    auto step = [&] {
      Tensor loss = cross_entropy((*model)(x), labels);
      sgd.zero_grad();
      loss.backward();
      if (sync_only) dist::world()->all_reduce(meet)->wait();
      sgd.step(0.01f);
    };
    for (int i = 0; i < 5; ++i) step();
    if (world.world_size > 1) dist::world()->barrier()->wait();
    auto* ddp = dynamic_cast<dist::DistributedDataParallel*>(model.get());
    double exposed_ms = 0;
    auto start = Clock::now();
    for (int i = 0; i < steps; ++i) {
      step();
      if (ddp) exposed_ms += ddp->reducer().exposed_wait_ms();
    }
    if (world.world_size > 1) dist::world()->barrier()->wait();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const io::JsonOut line = {
        {"framework", "dpt"},
        {"model", model_name},
        {"np", world.world_size},
        {"batch_per_rank", batch},
        {"threads", threads_get()},
        {"ms_per_step", seconds / steps * 1e3},
        {"exposed_comm_ms", exposed_ms / steps},
        {"images_per_sec", static_cast<double>(batch) * world.world_size * steps / seconds}};
    if (world.rank == 0) std::printf("%s\n", io::json_text(io::json_rounded(line)).c_str());
  } catch (const std::exception& e) {
    dist::abort_all(std::string("error: ") + e.what(), 2);
  }
  dist::finalize();
  return 0;
}
