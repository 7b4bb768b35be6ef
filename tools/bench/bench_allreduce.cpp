// All-reduce benchmark in the style of nccl-tests: for each size, the time of one f32 sum
// all_reduce through dpt's ProcessGroup (call + wait) against raw MPI on the same buffer in
// the same run, with algbw = bytes / time and busbw = algbw * 2(n-1)/n. Two dpt columns: a
// tensor in ordinary memory (the caller starts the collective and polls it in wait()), and
// "shared", a tensor from ProcessGroup::collective_buffer, which ranks on one machine
// all-reduce in place in shared memory (shm_buffer.h; DDP's buckets). Across hosts
// (tools/cluster.sh), three more columns time the shared tensor as DDP's buckets go with each
// distributed.hierarchical / compress setting. Each measurement repeats its call as often as
// fills --budget-ms (3 to 2000 calls; 50 in the overlap section). Run:
//   mpirun --oversubscribe -np 2 build/bench_allreduce [--min-bytes 4] [--max-bytes 268435456]
//     [--budget-ms 100] [--rounds 2] [--min-sleep-us 2] [--max-sleep-us 128]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "comm/dist.h"
#include "comm/mpi_process_group.h"

using namespace dpt;
using namespace dpt::dist;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds per call of `op`, run `iters` times between barriers: the slowest rank's, on all.
double time_per_call(int iters, const std::function<void()>& op) {
  MPI_Barrier(MPI_COMM_WORLD);
  double begin = now_s();
  for (int i = 0; i < iters; ++i) op();
  double mine = (now_s() - begin) / iters, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

// The same on every rank: rank 0's choice of how many calls fill `budget_s`.
int iterations_for(double seconds_per_call, double budget_s, int max_iters = 2000) {
  int iters =
      static_cast<int>(std::clamp(budget_s / std::max(seconds_per_call, 1e-9), 3.0, double(max_iters)));
  MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return iters;
}

// Seconds per call of `op`, over as many calls (3 to max_iters) as fill `budget_s`: on a
// slow link or oversubscribed cores a barrier takes milliseconds, not microseconds.
double time_in_budget(double budget_s, int max_iters, const std::function<void()>& op) {
  return time_per_call(iterations_for(time_per_call(1, op), budget_s, max_iters), op);
}

// Cache-resident arithmetic standing in for backward's kernels.
float compute(int reps) {
  static std::vector<float> a(1 << 14, 1.0f);
  for (int r = 0; r < reps; ++r) {
    for (float& x : a) x = x * 0.999f + 0.001f;
  }
  return a[0];
}

// As in DDP's backward: the caller computes while an all-reduce of `count` floats is in
// flight, on the same core(s). Compares dpt (started by the caller, progressed in the
// background by the communication thread's back-off poll), dpt with a poll loop that never
// sleeps, and a helper thread in blocking MPI_Allreduce (MPI's own spinning wait).
void overlap_section(ProcessGroup& group, MpiProcessGroup& mpi_group, const Tensor& t,
                     const PollPolicy& policy, int rank, double budget_s) {
  const int count = static_cast<int>(t.numel());
  float* data = t.data<float>();
  volatile float sink = 0;
  mpi_group.set_poll_policy(policy);
  const double m = time_in_budget(budget_s, 50, [&] { group.all_reduce(t)->wait(); });
  // Compute as long as the all-reduce: the case where overlap could hide it all.
  const double per_rep = time_per_call(20, [&] { sink = sink + compute(10); }) / 10;
  int reps = std::max(1, static_cast<int>(m / per_rep));
  MPI_Bcast(&reps, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const int iters = iterations_for(std::max(m, per_rep * reps), budget_s, 50);
  const double c = time_per_call(iters, [&] { sink = sink + compute(reps); });
  auto overlapped = [&] {
    WorkPtr work = group.all_reduce(t);
    sink = sink + compute(reps);
    work->wait();
  };
  const double o_dpt = time_per_call(iters, overlapped);
  PollPolicy spinning = policy;
  spinning.min_sleep_us = spinning.max_sleep_us = 0;
  mpi_group.set_poll_policy(spinning);
  const double o_spin = time_per_call(iters, overlapped);
  mpi_group.set_poll_policy(policy);

  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  std::binary_semaphore go(0), done(0);
  bool stop = false;
  std::thread helper([&] {
    for (;;) {
      go.acquire();
      if (stop) return;
      MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, comm);
      done.release();
    }
  });
  const double o_blocking = time_per_call(iters, [&] {
    go.release();
    sink = sink + compute(reps);
    done.acquire();
  });
  stop = true;
  go.release();
  helper.join();
  MPI_Comm_free(&comm);
  if (rank == 0) {
    std::printf(
        "# overlap, %d bytes: compute alone %.0f us, all_reduce alone %.0f us (max %.0f: the ideal with a "
        "spare core; sum %.0f)\n",
        count * 4, c * 1e6, m * 1e6, std::max(c, m) * 1e6, (c + m) * 1e6);
    std::printf(
        "#   compute with the all_reduce in flight: dpt %.0f us, dpt polling without sleeps %.0f us,\n",
        o_dpt * 1e6, o_spin * 1e6);
    std::printf("#   helper thread in blocking MPI_Allreduce %.0f us\n", o_blocking * 1e6);
  }
}

int64_t arg_int(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const InitInfo& me = init();
  const int64_t min_bytes = arg_int(argc, argv, "--min-bytes", 4);
  const int64_t max_bytes = arg_int(argc, argv, "--max-bytes", int64_t(256) << 20);
  const double budget_s = arg_int(argc, argv, "--budget-ms", 100) / 1000.0;
  const int rounds = static_cast<int>(std::max<int64_t>(1, arg_int(argc, argv, "--rounds", 2)));
  const int n = me.world_size;
  GroupPtr group = world();
  auto* mpi_group = dynamic_cast<MpiProcessGroup*>(group.get());
  PollPolicy fast;
  fast.min_sleep_us = static_cast<int>(arg_int(argc, argv, "--min-sleep-us", fast.min_sleep_us));
  fast.max_sleep_us = static_cast<int>(arg_int(argc, argv, "--max-sleep-us", fast.max_sleep_us));
  mpi_group->set_poll_policy(fast);

  Tensor buffer = Tensor::zeros({std::max<int64_t>(max_bytes / 4, 1)});
  float* data = buffer.data<float>();
  Tensor shared_buffer = group->collective_buffer(buffer.numel(), DType::f32, Device::cpu());
  const bool across_hosts = mpi_group->host_groups().across != nullptr;

  // The fixed cost alone: a 0-element all_reduce makes no MPI call, so call + wait is dpt's
  // bookkeeping.
  Tensor empty = Tensor::zeros({0});
  for (int i = 0; i < 100; ++i) group->all_reduce(empty)->wait();
  const double overhead = time_in_budget(budget_s, 2000, [&] { group->all_reduce(empty)->wait(); });
  const double barrier_mpi = time_in_budget(budget_s, 2000, [&] { MPI_Barrier(MPI_COMM_WORLD); });
  const double barrier_dpt = time_in_budget(budget_s, 2000, [&] { group->barrier()->wait(); });

  if (me.rank == 0) {
    std::printf(
        "# dpt all_reduce benchmark: %d ranks, f32 sum, in place; per call, slowest rank, best of %d "
        "rounds\n",
        n, rounds);
    std::printf("# 0-element all_reduce (no MPI call): dpt %.2f us\n", overhead * 1e6);
    std::printf("# barrier: MPI_Barrier %.1f us, dpt barrier %.1f us\n", barrier_mpi * 1e6,
                barrier_dpt * 1e6);
    std::printf(
        "# MPI: blocking MPI_Allreduce; I+W: MPI_Iallreduce + MPI_Wait on the caller; dpt: all_reduce + "
        "wait\n");
    std::printf(
        "# (the caller starts it and polls it); shared: the same on a tensor from collective_buffer\n"
        "# (ranks on one machine: reduced in place in shared memory). algbw, busbw: dpt's\n");
    if (across_hosts) {
      std::printf(
          "# ranks on several hosts: shared as DDP's buckets go with distributed.hierarchical false (flat),\n"
          "# true (hier) and true with compress bf16 (bf16)\n");
    }
    std::printf("%11s %9s %6s %10s %10s %10s %9s %9s %7s %7s %10s %7s", "bytes", "count", "iters", "MPI us",
                "I+W us", "dpt us", "algbw", "busbw", "dpt/MPI", "I+W/MPI", "shared us", "sh/MPI");
    if (across_hosts) std::printf(" %10s %10s %10s", "flat us", "hier us", "bf16 us");
    std::printf("\n%11s %9s %6s %10s %10s %10s %9s %9s %7s %7s %10s %7s\n", "", "", "", "", "", "", "GB/s",
                "GB/s", "", "", "", "");
  }

  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const int count = static_cast<int>(bytes / 4);
    Tensor t = buffer.as_strided({count}, {1}, 0);
    Tensor s = shared_buffer.as_strided({count}, {1}, 0);

    // Right answer first, both ways: rank r holds r + 1.
    const float expected = n * (n + 1) / 2.0f;
    // Across hosts also each way DDP's buckets can go (small integers: exact in bf16 too).
    auto shared_as = [&](Hierarchical mode, Compression compress) {
      mpi_group->set_hierarchical(mode);
      (compress == Compression::bf16 ? all_reduce_bf16_across_hosts(*mpi_group, s, ReduceOp::sum)
                                     : mpi_group->all_reduce(s))
          ->wait();
      mpi_group->set_hierarchical(Hierarchical::automatic);
    };
    std::vector<std::pair<Tensor, std::function<void()>>> checks = {
        {t, [&] { group->all_reduce(t)->wait(); }}, {s, [&] { group->all_reduce(s)->wait(); }}};
    if (across_hosts) {
      for (Hierarchical mode : {Hierarchical::off, Hierarchical::on}) {
        checks.push_back({s, [&, mode] { shared_as(mode, Compression::none); }});
      }
      checks.push_back({s, [&] { shared_as(Hierarchical::on, Compression::bf16); }});
    }
    for (const auto& [x, op] : checks) {
      float* p = x.data<float>();
      std::fill(p, p + count, static_cast<float>(me.rank + 1));
      op();
      if (p[0] != expected || p[count - 1] != expected) {
        abort_all("bench_allreduce: wrong sum at " + std::to_string(bytes) + " bytes", 1);
      }
      std::fill(p, p + count, 0.0f);  // zeros stay zeros: no overflow, no denormals
    }

    auto mpi = [&] { MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); };
    auto iw = [&] {
      MPI_Request request;
      MPI_Iallreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    };
    auto dpt = [&] { group->all_reduce(t)->wait(); };
    auto shared = [&] { group->all_reduce(s)->wait(); };
    mpi();
    const int iters = iterations_for(time_per_call(1, mpi), budget_s);
    // Each way across hosts fills the budget on its own: the hierarchical ones can take a
    // hundred times as long as MPI for small messages.
    auto flat = [&] { shared_as(Hierarchical::off, Compression::none); };
    auto hier = [&] { shared_as(Hierarchical::on, Compression::none); };
    auto bf16 = [&] { shared_as(Hierarchical::on, Compression::bf16); };
    int across_iters[3] = {0, 0, 0};
    if (across_hosts) {
      across_iters[0] = iterations_for(time_per_call(1, flat), budget_s);
      across_iters[1] = iterations_for(time_per_call(1, hier), budget_s);
      across_iters[2] = iterations_for(time_per_call(1, bf16), budget_s);
    }
    double t_mpi = 1e9, t_iw = 1e9, t_dpt = 1e9, t_shared = 1e9, t_flat = 1e9, t_hier = 1e9, t_bf16 = 1e9;
    for (int round = 0; round < rounds; ++round) {
      t_mpi = std::min(t_mpi, time_per_call(iters, mpi));
      t_iw = std::min(t_iw, time_per_call(iters, iw));
      t_dpt = std::min(t_dpt, time_per_call(iters, dpt));
      t_shared = std::min(t_shared, time_per_call(iters, shared));
      if (across_hosts) {
        t_flat = std::min(t_flat, time_per_call(across_iters[0], flat));
        t_hier = std::min(t_hier, time_per_call(across_iters[1], hier));
        t_bf16 = std::min(t_bf16, time_per_call(across_iters[2], bf16));
      }
    }
    if (me.rank == 0) {
      const double algbw = bytes / t_dpt / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
      std::printf("%11lld %9d %6d %10.1f %10.1f %10.1f %9.3f %9.3f %7.2f %7.2f %10.1f %7.2f",
                  static_cast<long long>(bytes), count, iters, t_mpi * 1e6, t_iw * 1e6, t_dpt * 1e6, algbw,
                  busbw, t_mpi / t_dpt, t_mpi / t_iw, t_shared * 1e6, t_mpi / t_shared);
      if (across_hosts) std::printf(" %10.1f %10.1f %10.1f", t_flat * 1e6, t_hier * 1e6, t_bf16 * 1e6);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  const int64_t overlap_bytes = std::min<int64_t>(max_bytes, 4 << 20);
  overlap_section(*group, *mpi_group, buffer.as_strided({overlap_bytes / 4}, {1}, 0), fast, me.rank,
                  budget_s);
  finalize();
  return 0;
}
