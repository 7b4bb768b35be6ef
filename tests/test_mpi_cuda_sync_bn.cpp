// sync_batch_norm2d on CUDA under mpirun -np N, each rank on a GPU of its own, its
// cross-rank sums through the world group on device tensors (NCCL): every rank's share of
// the output and of the input gradient, the parameter gradients summed over ranks and the
// running statistics must equal plain batch_norm2d over the whole batch on the CPU, which
// every rank computes itself. Skipped (on every rank) unless every rank has its own GPU.
#include <gtest/gtest.h>

#include "comm/dist.h"
#include "gradcheck.h"
#include "kernel_check.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/device.h"
#endif

#include "ops/norm.h"
#include "ops/sync_batch_norm.h"

using namespace dpt;
using dpt::testing::random_tensor;

namespace {

constexpr int64_t kBatch = 12;  // divisible by 1, 2, 3 and 4 ranks

// Empty when every rank has a GPU of its own (the same answer on every rank), else why not.
std::string why_not_every_rank_has_a_gpu() {
#ifdef DPT_WITH_CUDA
  const dist::InitInfo& me = dist::info();
  const int count = cuda::cuda_device_count();
  Tensor ok = Tensor::from_vector(std::vector<int64_t>{me.local_rank < count ? 1 : 0}, {1});
  dist::world()->all_reduce(ok, dist::ReduceOp::min)->wait();
  if (ok.data<int64_t>()[0] == 1) return "";
  return "no CUDA device for every rank (" + std::to_string(me.local_size) + " ranks on this machine, " +
         std::to_string(count) +
         " GPUs: " + (count ? "NCCL needs one per rank" : cuda::cuda_unavailable_reason()) + ")";
#else
  return "no CUDA device: this build of dpt has no CUDA backend";
#endif
}

Tensor rows(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t per = t.numel() / t.size(0);
  Shape shape = t.shape();
  shape[0] = end - begin;
  return t.as_strided(shape, t.strides(), t.offset() + begin * per).contiguous();
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  dpt::testing::expect_close(got, dpt::testing::to_double(want), what, 1e-4, 1e-4);
}

TEST(MpiCudaSyncBatchNorm, RanksTogetherMatchOneCpuBatch) {
  const std::string why = why_not_every_rank_has_a_gpu();
  if (!why.empty()) GTEST_SKIP() << why;
  const dist::InitInfo& me = dist::info();
  const Device gpu = Device::cuda(me.local_rank);
  const int64_t per_rank = kBatch / me.world_size, begin = me.rank * per_rank, end = begin + per_rank;
  Tensor x = random_tensor({kBatch, 3, 5, 5}, 1, -2.0f, 3.0f), upstream = random_tensor({kBatch, 3, 5, 5}, 2);
  Tensor w = random_tensor({3}, 3, 0.5f, 1.5f), b = random_tensor({3}, 4);
  Tensor rv0 = random_tensor({3}, 5, 0.5f, 1.5f);

  // The reference: one CPU batch_norm2d over the whole batch.
  Tensor xr = x.clone().set_requires_grad(true), wr = w.clone().set_requires_grad(true),
         br = b.clone().set_requires_grad(true);
  Tensor rm_ref = Tensor::zeros({3}), rv_ref = rv0.clone();
  Tensor out_ref = batch_norm2d(xr, wr, br, rm_ref, rv_ref, true, {0.1f, 1e-5f});
  out_ref.backward(upstream);

  // This rank's share on its GPU, summing across ranks on the device.
  Tensor xs = rows(x, begin, end).to(gpu).set_requires_grad(true);
  Tensor ws = w.to(gpu).set_requires_grad(true), bs = b.to(gpu).set_requires_grad(true);
  Tensor rm = Tensor::zeros({3}).to(gpu), rv = rv0.to(gpu);
  bool on_device = true;
  SumAcrossRanks sum = [&](const Tensor& t) {
    on_device = on_device && t.device() == gpu;
    dist::world()->all_reduce(t, dist::ReduceOp::sum)->wait();
  };
  Tensor out = sync_batch_norm2d(xs, ws, bs, rm, rv, {0.1f, 1e-5f}, sum);
  out.backward(rows(upstream, begin, end).to(gpu));
  EXPECT_TRUE(on_device);

  expect_close(out, rows(out_ref.detach(), begin, end), "output rows of rank " + std::to_string(me.rank));
  expect_close(xs.grad(), rows(xr.grad(), begin, end), "grad x rows of rank " + std::to_string(me.rank));
  Tensor gw = ws.grad().clone(), gb = bs.grad().clone();  // this rank's shares, summed here
  dist::world()->all_reduce(gw, dist::ReduceOp::sum)->wait();
  dist::world()->all_reduce(gb, dist::ReduceOp::sum)->wait();
  expect_close(gw, wr.grad(), "grad weight");
  expect_close(gb, br.grad(), "grad bias");
  expect_close(rm, rm_ref, "running mean");
  expect_close(rv, rv_ref, "running var");
}

}  // namespace
