// fault_rank: a two-rank program that goes wrong on purpose, for tests/test_faults.cpp, which
// runs it under mpirun and checks how the job ends. Rank 0 always does the right thing and
// soon waits in a collective; rank 1 does what the scenario says:
//   debug-mismatch  all_reduce of 1001 elements where rank 0 has 1000, with debug: collectives
//   size-mismatch   all_reduce of 0 elements where rank 0 has 1000 (no MPI traffic: rank 0 hangs)
//   missing         never calls the all_reduce (computes for a long time instead)
//   throw           throws a dpt::Error
//   segv            writes to a read-only page (SIGSEGV)
//   kill            raise(SIGKILL)
//   terminate       an exception escapes a thread (std::terminate)
// Errors end the job as train does: "[rank R] error: ..." and abort_all(), exit code 2.
// The timeout (distributed.timeout_s) is 2 s in the scenarios about a timeout (size-mismatch,
// missing) and 20 s in the others, so that rank 1's own fault, 0.3 s in, comes before rank
// 0's timeout however long a busy machine keeps rank 1 from running.
//   mpirun -np 2 build/fault_rank SCENARIO [timeout_s]
#include <signal.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "comm/dist.h"

using namespace dpt;

namespace {

Tensor ones(int64_t n) { return Tensor::from_vector(std::vector<float>(static_cast<size_t>(n), 1.0f), {n}); }

void sleep_s(double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }

// Rank 1's part; `late` lets rank 0 be waiting in its collective before the fault.
void misbehave(const std::string& scenario, dist::ProcessGroup& world) {
  const double late = 0.3, long_time = 60;
  if (scenario == "debug-mismatch") {
    world.all_reduce(ones(1001))->wait();
  } else if (scenario == "size-mismatch") {
    world.all_reduce(ones(0))->wait();
    sleep_s(long_time);
  } else if (scenario == "missing") {
    sleep_s(long_time);
  } else if (scenario == "throw") {
    sleep_s(late);
    DPT_FAIL() << "rank 1 fails on purpose";
  } else if (scenario == "segv") {
    sleep_s(late);
    // A store to a read-only page: a real fault (a null pointer is reported by
    // UndefinedBehaviorSanitizer first in a sanitizer build).
    void* page = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *static_cast<volatile int*>(page) = 1;
  } else if (scenario == "kill") {
    sleep_s(late);
    raise(SIGKILL);
  } else if (scenario == "terminate") {
    sleep_s(late);
    std::thread([] { throw std::runtime_error("thrown on a thread of rank 1 on purpose"); }).join();
  } else {
    DPT_FAIL() << "unknown scenario '" << scenario << "'";
  }
  world.barrier()->wait();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fault_rank SCENARIO [timeout_s]\n");
    return 2;
  }
  const std::string scenario = argv[1];
  try {
    const dist::InitInfo& info = dist::init();
    DPT_CHECK(info.world_size == 2) << "fault_rank runs on 2 ranks, got " << info.world_size;
    const bool about_a_timeout = scenario == "size-mismatch" || scenario == "missing";
    dist::set_timeout(argc > 2 ? std::atof(argv[2]) : about_a_timeout ? 2.0 : 20.0);
    dist::set_debug_collectives(scenario == "debug-mismatch");
    dist::GroupPtr world = dist::world();
    world->barrier()->wait();
    if (info.rank == 1) {
      misbehave(scenario, *world);
    } else {
      world->all_reduce(ones(1000))->wait();
      world->barrier()->wait();
    }
  } catch (const std::exception& e) {
    if (dist::initialized()) dist::abort_all(std::string("error: ") + e.what(), 2);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  dist::finalize();
  return 0;
}
