// sync_batch_norm2d on the CPU under mpirun -np N, its cross-rank sums through the world
// group, with an uneven global batch of 13 (ranks hold different numbers of rows): every
// rank's share of the output and of the input gradient, the parameter gradients summed over
// ranks and the running statistics must equal plain batch_norm2d over the whole batch,
// which every rank computes itself; and the gradients must match finite differences of the
// global loss, taken with every rank running the op together.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "autograd/node.h"
#include "comm/dist.h"
#include "gradcheck.h"
#include "kernel_check.h"
#include "ops/norm.h"
#include "ops/sync_batch_norm.h"

using namespace dpt;
using dpt::testing::random_tensor;

namespace {

constexpr int64_t kBatch = 13, kChannels = 3;  // 13 rows do not divide by 2, 3 or 4 ranks
const BatchNormOptions kOptions{0.1f, 1e-5f};

// This rank's rows of the global batch, contiguous.
Tensor my_rows(const Tensor& t) {
  const dist::Chunk c = dist::chunk_of(t.size(0), dist::info().world_size, dist::info().rank);
  const int64_t per = t.numel() / t.size(0);
  Shape shape = t.shape();
  shape[0] = c.end - c.begin;
  return t.as_strided(shape, t.strides(), t.offset() + c.begin * per).contiguous();
}

const SumAcrossRanks kWorldSum = [](const Tensor& t) {
  dist::world()->all_reduce(t, dist::ReduceOp::sum)->wait();
};

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  dpt::testing::expect_close(got, dpt::testing::to_double(want), what, 1e-5, 1e-4);
}

// Sum over ranks of a double, exact and in rank order: each rank's bits gathered as i64.
double sum_over_ranks(double mine) {
  const int n = dist::info().world_size;
  int64_t bits = 0;
  std::memcpy(&bits, &mine, sizeof bits);
  Tensor all = Tensor::empty({n}, DType::i64);
  dist::world()->all_gather(all, Tensor::from_vector(std::vector<int64_t>{bits}, {1}))->wait();
  double total = 0;
  for (int r = 0; r < n; ++r) {
    double v = 0;
    std::memcpy(&v, all.data<int64_t>() + r, sizeof v);
    total += v;
  }
  return total;
}

// The global loss sum over every rank's output of weight * output, in double.
double global_loss(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& weights) {
  autograd::NoGrad no_grad;
  Tensor out = sync_batch_norm2d(x, w, b, Tensor(), Tensor(), kOptions, kWorldSum);
  std::vector<float> o = out.to_vector(), g = weights.to_vector();
  double mine = 0;
  for (size_t i = 0; i < o.size(); ++i) mine += static_cast<double>(o[i]) * g[i];
  return sum_over_ranks(mine);
}

}  // namespace

TEST(MpiSyncBatchNorm, RanksTogetherMatchOneBatch) {
  const int rank = dist::info().rank;
  Tensor x = random_tensor({kBatch, kChannels, 4, 5}, 1, -2.0f, 3.0f);
  Tensor upstream = random_tensor({kBatch, kChannels, 4, 5}, 2);
  Tensor w = random_tensor({kChannels}, 3, 0.5f, 1.5f), b = random_tensor({kChannels}, 4);
  Tensor rv0 = random_tensor({kChannels}, 5, 0.5f, 1.5f);

  // The reference: plain batch_norm2d over the whole batch, in one process.
  Tensor xr = x.clone().set_requires_grad(true), wr = w.clone().set_requires_grad(true),
         br = b.clone().set_requires_grad(true);
  Tensor rm_ref = Tensor::zeros({kChannels}), rv_ref = rv0.clone();
  Tensor out_ref = batch_norm2d(xr, wr, br, rm_ref, rv_ref, true, kOptions);
  out_ref.backward(upstream);

  Tensor xs = my_rows(x).set_requires_grad(true);
  Tensor ws = w.clone().set_requires_grad(true), bs = b.clone().set_requires_grad(true);
  Tensor rm = Tensor::zeros({kChannels}), rv = rv0.clone();
  Tensor out = sync_batch_norm2d(xs, ws, bs, rm, rv, kOptions, kWorldSum);
  out.backward(my_rows(upstream));

  const std::string of_rank = " rows of rank " + std::to_string(rank);
  expect_close(out, my_rows(out_ref.detach()), "output" + of_rank);
  expect_close(xs.grad(), my_rows(xr.grad()), "grad x" + of_rank);
  Tensor gw = ws.grad().clone(), gb = bs.grad().clone();  // this rank's shares, summed here
  dist::world()->all_reduce(gw)->wait();
  dist::world()->all_reduce(gb)->wait();
  expect_close(gw, wr.grad(), "grad weight");
  expect_close(gb, br.grad(), "grad bias");
  expect_close(rm, rm_ref, "running mean");
  expect_close(rv, rv_ref, "running var (unbiased over the whole batch)");
}

TEST(MpiSyncBatchNorm, GradientsMatchFiniteDifferencesOfTheGlobalLoss) {
  // L = sum over ranks of sum(weights * out). An element of one rank's x moves every rank's
  // output (through the shared statistics): all ranks evaluate L for each perturbation.
  const int n = dist::info().world_size, rank = dist::info().rank;
  Tensor x = my_rows(random_tensor({kBatch, kChannels, 3, 4}, 11, -1.0f, 2.0f)).set_requires_grad(true);
  Tensor w = random_tensor({kChannels}, 12, 0.5f, 1.5f).set_requires_grad(true);
  Tensor b = random_tensor({kChannels}, 13).set_requires_grad(true);
  Tensor weights = my_rows(random_tensor({kBatch, kChannels, 3, 4}, 14));
  sync_batch_norm2d(x, w, b, Tensor(), Tensor(), kOptions, kWorldSum).backward(weights);
  const std::vector<float> gx = x.grad().to_vector();
  Tensor gw = w.grad().clone(), gb = b.grad().clone();  // the global gradients: the ranks' shares summed
  dist::world()->all_reduce(gw)->wait();
  dist::world()->all_reduce(gb)->wait();

  const double eps = 1e-2, atol = 2e-3, rtol = 2e-2;
  auto numeric = [&](float* p) {  // the derivative of L by *p (nullptr: this rank moves nothing)
    const float saved = p ? *p : 0.0f;
    if (p) *p = saved + static_cast<float>(eps);
    const double up = global_loss(x.detach(), w.detach(), b.detach(), weights);
    if (p) *p = saved - static_cast<float>(eps);
    const double down = global_loss(x.detach(), w.detach(), b.detach(), weights);
    if (p) *p = saved;
    return (up - down) / (2 * eps);
  };
  std::mt19937 gen(99 + rank);
  for (int q = 0; q < n; ++q) {  // rank q moves 8 of its elements, one at a time
    for (int k = 0; k < 8; ++k) {
      const int64_t i = static_cast<int64_t>(gen() % static_cast<uint32_t>(x.numel()));
      const double d = numeric(q == rank ? x.data<float>() + i : nullptr);
      if (q == rank) {
        EXPECT_NEAR(gx[i], d, atol + rtol * std::abs(d)) << "x element " << i << " of rank " << rank;
      }
    }
  }
  for (int64_t c = 0; c < kChannels; ++c) {  // weight and bias are the same on every rank: all move them
    const double dw = numeric(w.data<float>() + c), db = numeric(b.data<float>() + c);
    EXPECT_NEAR(gw.data<float>()[c], dw, atol + rtol * std::abs(dw)) << "weight " << c;
    EXPECT_NEAR(gb.data<float>()[c], db, atol + rtol * std::abs(db)) << "bias " << c;
  }
}
