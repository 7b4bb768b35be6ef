// reduce, gather, scatter and all_to_all on CUDA tensors under mpirun -np N, each rank on a
// GPU of its own, through the world group's NCCL backend: the closed forms of
// test_mpi_more_collectives (inputs that depend on the rank) for every root, with outputs
// poisoned first, checked on the CPU. Skipped (on every rank) unless every rank has its own
// GPU; with one GPU, CTest runs it at np 1 (CudaMpiCollectives.np1).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "closed_form.h"
#include "comm/dist.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/device.h"
#endif

using namespace dpt;
using namespace dpt::dist;
using dpt::testing::expect_values;
using dpt::testing::make;

namespace {

// Empty when every rank has a GPU of its own (the same answer on every rank), else why not.
std::string why_not_every_rank_has_a_gpu() {
#ifdef DPT_WITH_CUDA
  const InitInfo& me = info();
  const int count = cuda::cuda_device_count();
  Tensor ok = Tensor::from_vector(std::vector<int64_t>{me.local_rank < count ? 1 : 0}, {1});
  world()->all_reduce(ok, ReduceOp::min)->wait();
  if (ok.data<int64_t>()[0] == 1) return "";
  return "no CUDA device for every rank (" + std::to_string(me.local_size) + " ranks on this machine, " +
         std::to_string(count) +
         " GPUs: " + (count ? "NCCL needs one per rank" : cuda::cuda_unavailable_reason()) + ")";
#else
  return "no CUDA device: this build of dpt has no CUDA backend";
#endif
}

class MpiCudaCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = why_not_every_rank_has_a_gpu();
    if (!why.empty()) GTEST_SKIP() << why;
    gpu = Device::cuda(info().local_rank);
  }
  Tensor on_gpu(const Tensor& t) const { return t.to(gpu); }
  Device gpu = Device::cpu();
};

constexpr int64_t kM = 30011;  // elements per rank: several NCCL chunks, not a round number

}  // namespace

TEST_F(MpiCudaCollectives, ReduceToEveryRoot) {
  GroupPtr w = world();
  const int n = w->size(), me = w->rank();
  const double s = n * (n + 1) / 2.0;
  for (int root = 0; root < n; ++root) {
    auto input = [&](int64_t i) { return (me + 1) + i % 101; };
    Tensor sum = on_gpu(make<float>(kM, input)), mx = on_gpu(make<float>(kM, input));
    Tensor avg = on_gpu(make<float>(kM, input));
    w->reduce(sum, root)->wait();
    w->reduce(mx, root, ReduceOp::max)->wait();
    w->reduce(avg, root, ReduceOp::avg)->wait();
    const std::string at = "root " + std::to_string(root) + ", rank " + std::to_string(me);
    if (me == root) {
      expect_values<float>(
          sum.to(Device::cpu()), [&](int64_t i) { return s + n * (i % 101); }, "sum, " + at);
      expect_values<float>(
          mx.to(Device::cpu()), [&](int64_t i) { return n + i % 101; }, "max, " + at);
      expect_values<float>(
          avg.to(Device::cpu()), [&](int64_t i) { return static_cast<float>(s + n * (i % 101)) / n; },
          "avg, " + at);
    } else {
      expect_values<float>(sum.to(Device::cpu()), input, "non-root left as it was, " + at);
    }
  }
}

TEST_F(MpiCudaCollectives, GatherAndScatterFromEveryRoot) {
  GroupPtr w = world();
  const int n = w->size(), me = w->rank();
  for (int root = 0; root < n; ++root) {
    Tensor in = on_gpu(make<float>(kM, [&](int64_t i) { return me * 100000 + i; }));
    Tensor gathered = me == root ? on_gpu(make<float>(n * kM, [](int64_t) { return -1; })) : Tensor();
    Tensor whole =
        me == root ? on_gpu(make<float>(n * kM, [&](int64_t k) { return 2 * k + root; })) : Tensor();
    Tensor part = on_gpu(make<float>(kM, [](int64_t) { return -1; }));
    WorkPtr a = w->gather(gathered, in, root), b = w->scatter(part, whole, root);
    b->wait();
    a->wait();
    const std::string at = "root " + std::to_string(root) + ", rank " + std::to_string(me);
    if (me == root) {
      expect_values<float>(
          gathered.to(Device::cpu()), [&](int64_t k) { return (k / kM) * 100000 + k % kM; }, "gather, " + at);
    }
    expect_values<float>(
        part.to(Device::cpu()), [&](int64_t i) { return 2 * (me * kM + i) + root; }, "scatter, " + at);
  }
}

TEST_F(MpiCudaCollectives, AllToAllUnevenSplits) {
  // Rank `from` sends count(from, to) elements to rank `to`, element j of that block being
  // from * 16 + to + 64 * (j % 4096); some counts are 0.
  GroupPtr w = world();
  const int n = w->size(), me = w->rank();
  auto count = [](int from, int to) -> int64_t { return (from + 2 * to) % 5 * 1000 + (from == to ? 7 : 0); };
  auto value = [](int from, int to, int64_t j) { return from * 16 + to + 64 * (j % 4096); };
  std::vector<int64_t> in_splits(n), out_splits(n);
  std::vector<float> in_values, out_values;
  for (int r = 0; r < n; ++r) {
    in_splits[r] = count(me, r);
    out_splits[r] = count(r, me);
    for (int64_t j = 0; j < in_splits[r]; ++j) in_values.push_back(static_cast<float>(value(me, r, j)));
    for (int64_t j = 0; j < out_splits[r]; ++j) out_values.push_back(static_cast<float>(value(r, me, j)));
  }
  const auto in_n = static_cast<int64_t>(in_values.size()), out_n = static_cast<int64_t>(out_values.size());
  Tensor in = on_gpu(Tensor::from_vector(in_values, {in_n}));
  Tensor out = on_gpu(make<float>(out_n, [](int64_t) { return -1; }));
  w->all_to_all(out, in, out_splits, in_splits)->wait();
  EXPECT_EQ(out.to(Device::cpu()).to_vector(), out_values) << "rank " << me;
}
