// Data-parallel training throughput: a registered model on a fixed synthetic batch per
// rank, wrapped in DistributedDataParallel when there are several ranks, SGD with
// momentum. Rank 0 prints one JSON line with the global images/s, the time each step
// spent waiting for gradients after backward (communication not hidden by it) and, when the
// ranks span several hosts, the bytes a step sent across the hosts' links.
//   mpirun -np N bench_ddp [model] [batch per rank] [threads] [steps] [bucket_cap_mb]
//                          [all-reduces: HIERARCHICAL/COMPRESS,...] [rounds]
// e.g. ... 25 false/none,true/none,true/bf16 5: flat, hierarchical, hierarchical + bf16.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/threading.h"
#include "parallel/ddp.h"
#include "comm/dist.h"
#include "comm/mpi_process_group.h"
#include "io/json.h"
#include "models/registry.h"
#include "ops/loss.h"
#include "optim/sgd.h"

using namespace dpt;
using Clock = std::chrono::steady_clock;

namespace {

// Bytes this host has sent on its network interfaces other than loopback (/proc/net/dev of
// its network namespace). Under tools/cluster.sh that is its link to the other hosts.
int64_t host_bytes_sent() {
  std::ifstream dev("/proc/net/dev");
  int64_t total = 0;
  std::string line;
  for (int skip = 0; skip < 2 && std::getline(dev, line); ++skip) {
  }
  while (std::getline(dev, line)) {
    const size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    std::istringstream fields(line.substr(colon + 1));
    int64_t value = 0, tx_bytes = 0;
    for (int k = 0; k < 9 && fields >> value; ++k)
      if (k == 8) tx_bytes = value;  // receive: 8 fields, then transmit bytes
    if (name != "lo") total += tx_bytes;
  }
  return total;
}

// The bytes sent across the links since `since` (this host's count then), summed over the
// hosts: each host's first local rank contributes its host's. Collective over MPI_COMM_WORLD.
int64_t link_bytes_since(int64_t since) {
  int64_t mine = dist::info().local_rank == 0 ? host_bytes_sent() - since : 0, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return sum;
}

// One configuration of DDP's all-reduce: "HIERARCHICAL/COMPRESS", e.g. "true/bf16".
struct AllReduceChoice {
  std::string text;
  dist::Hierarchical hierarchical;
  dist::Compression compress;
};

std::vector<AllReduceChoice> parse_choices(const std::string& list) {
  std::vector<AllReduceChoice> choices;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t slash = item.find('/');
    const std::string h = item.substr(0, slash),
                      c = slash == std::string::npos ? "none" : item.substr(slash + 1);
    DPT_CHECK((h == "auto" || h == "true" || h == "false") && (c == "none" || c == "bf16"))
        << "bench_ddp: argument 6 expects HIERARCHICAL/COMPRESS items (auto|true|false / none|bf16), "
        << "separated by commas, got '" << item << "'";
    choices.push_back({item,
                       h == "true"    ? dist::Hierarchical::on
                       : h == "false" ? dist::Hierarchical::off
                                      : dist::Hierarchical::automatic,
                       c == "bf16" ? dist::Compression::bf16 : dist::Compression::none});
  }
  DPT_CHECK(!choices.empty()) << "bench_ddp: argument 6 lists no configuration";
  return choices;
}

}  // namespace

// Several configurations of the all-reduce (argument 6) are measured in turn, `rounds` times
// over (argument 7), in one job: alternating, so that a machine whose speed drifts affects
// each alike. One JSON line per configuration and round.
int main(int argc, char** argv) {
  std::string model_name = argc > 1 ? argv[1] : "mnist_cnn";
  int64_t batch = argc > 2 ? std::stoll(argv[2]) : 64;
  int threads = argc > 3 ? std::stoi(argv[3]) : 1;
  int steps = argc > 4 ? std::stoi(argv[4]) : 40;
  double bucket_cap_mb = argc > 5 ? std::stod(argv[5]) : 25.0;
  const std::string choice_list = argc > 6 ? argv[6] : "auto/none";
  const int rounds = argc > 7 ? std::stoi(argv[7]) : 1;
  try {
    const dist::InitInfo& world = dist::init();
    const std::vector<AllReduceChoice> choices = parse_choices(choice_list);
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
    // DPT_BENCH_NO_DDP=1: the ranks train independently, to measure what sharing the machine
    // costs without any communication.
    // DPT_BENCH_SYNC_ONLY=1: no DDP, but the ranks meet once a step (a 1-element all-reduce
    // after backward), to measure what waiting for the slower rank costs by itself.
    const bool sync_only = world.world_size > 1 && std::getenv("DPT_BENCH_SYNC_ONLY");
    bool use_ddp = world.world_size > 1 && !std::getenv("DPT_BENCH_NO_DDP") && !sync_only;
    Tensor x = Tensor::empty({batch, c, hw, hw});
    Rng(1 + world.rank).fill_normal(x, 0.0f, 1.0f);
    std::vector<int64_t> y(batch);
    for (int64_t i = 0; i < batch; ++i) y[i] = (i + world.rank) % 10;
    Tensor labels = Tensor::from_vector(y, {batch});
    Tensor meet = Tensor::zeros({1});
    for (int round = 0; round < rounds; ++round)
      for (const AllReduceChoice& choice : choices) {
        nn::ModulePtr model = models::build_model(node, {c, hw, hw, 10, 0});
        dist::set_hierarchical(choice.hierarchical);
        if (use_ddp)
          model = std::make_shared<dist::DistributedDataParallel>(
              model, dist::world(),
              dist::DdpOptions{.bucket_cap_mb = bucket_cap_mb, .compress = choice.compress});
        optim::Sgd sgd(optim::param_groups(*model, 5e-4f, false), {0.9f, true});
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
        const int64_t sent_before = host_bytes_sent();
        auto start = Clock::now();
        for (int i = 0; i < steps; ++i) {
          step();
          if (ddp) exposed_ms += ddp->reducer().exposed_wait_ms();
        }
        if (world.world_size > 1) dist::world()->barrier()->wait();
        double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        const int64_t link_bytes = world.world_size > 1 ? link_bytes_since(sent_before) : 0;
        io::JsonOut line = {
            {"framework", "dpt"},
            {"model", model_name},
            {"np", world.world_size},
            {"hosts", world.node_count},
            {"all_reduce", choice.text},
            {"round", round},
            {"batch_per_rank", batch},
            {"threads", threads_get()},
            {"ms_per_step", seconds / steps * 1e3},
            {"exposed_comm_ms", exposed_ms / steps},
            {"images_per_sec", static_cast<double>(batch) * world.world_size * steps / seconds}};
        if (world.node_count > 1) line["link_bytes_per_step"] = static_cast<double>(link_bytes) / steps;
        if (world.rank == 0) std::printf("%s\n", io::json_text(io::json_rounded(line)).c_str());
        std::fflush(stdout);
      }
  } catch (const std::exception& e) {
    dist::abort_all(std::string("error: ") + e.what(), 2);
  }
  dist::finalize();
  return 0;
}
