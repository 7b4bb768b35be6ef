// DistributedDataParallel under mpirun -np N: N ranks at batch B/N must end with the
// same parameters as one process at batch B (each rank also trains that one-process
// reference itself, so the check needs nothing but the run), for several bucket sizes,
// with no_sync accumulation, and with synchronised batch-norm; plus overlap, unused
// parameters and mismatched models; replicas built from different seeds (the initial
// broadcast), BatchNorm buffers without sync_bn, a data set that does not divide by the
// world size, and DDP on a proper sub-group.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/node.h"
#include "datasets/loader.h"
#include "datasets/sampler.h"
#include "datasets/shuffle.h"
#include "datasets/synthetic.h"
#include "distributed/ddp.h"
#include "distributed/dist.h"
#include "nn/layers.h"
#include "nn/sequential.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "optim/sgd.h"

using namespace dpt;
using ::testing::HasSubstr;

namespace {

constexpr int64_t kBatch = 24;  // divisible by 1, 2, 3 and 4 ranks

nn::ModulePtr small_cnn(bool batch_norm, uint64_t seed = 7) {
  Rng rng(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->add(std::make_shared<nn::Conv2d>(1, 4, 3, rng, Conv2dOptions{.padding = 1}, !batch_norm));
  if (batch_norm) net->add(std::make_shared<nn::BatchNorm2d>(4));
  net->add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Conv2d>(4, 8, 3, rng, Conv2dOptions{.padding = 1}))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::Flatten>())
      .add(std::make_shared<nn::Linear>(8 * 4 * 4, 16, rng))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::Linear>(16, 5, rng));
  return net;
}

struct Data {
  Tensor images, labels;
};

// Step k's global batch, the same on every rank.
Data global_batch(int step) {
  Tensor x = Tensor::empty({kBatch, 1, 8, 8});
  Rng(100 + step).fill_normal(x, 0, 1);
  std::vector<int64_t> y(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) y[i] = (i * 7 + step) % 5;
  return {x, Tensor::from_vector(y, {kBatch})};
}

Data rows(const Data& d, int64_t begin, int64_t end) {
  int64_t per = d.images.numel() / d.images.size(0);
  Tensor x = d.images.as_strided({end - begin, 1, 8, 8}, {64, 64, 8, 1}, d.images.offset() + begin * per);
  Tensor y = d.labels.as_strided({end - begin}, {1}, d.labels.offset() + begin);
  return {x, y};
}

void sgd_steps(nn::Module& model, const std::function<void(int, optim::Sgd&)>& step_fn, int steps) {
  optim::Sgd sgd(optim::param_groups(model, 1e-3f, false), {0.9f, true});
  for (int k = 0; k < steps; ++k) {
    sgd.zero_grad();
    step_fn(k, sgd);
    sgd.step(0.05f);
  }
}

double max_relative_difference(const nn::NamedTensors& a, const nn::NamedTensors& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<float> va = a[i].second.to_vector(), vb = b[i].second.to_vector();
    for (size_t j = 0; j < va.size(); ++j) {
      diff = std::max(diff, static_cast<double>(std::abs(va[j] - vb[j])));
      scale = std::max(scale, static_cast<double>(std::abs(vb[j])));
    }
  }
  return diff / scale;
}

// The seed of a replica built from a seed of its rank's own: only DDP's initial broadcast
// then makes the replicas equal.
uint64_t own_seed(int world_rank) { return 7 + 1000 * static_cast<uint64_t>(world_rank); }

// Trains the DDP replicas on shards and a local reference on the whole batch. With
// own_seeds, each replica starts from own_seed(its world rank) and the reference from that
// of the group's rank 0.
double ddp_vs_single(bool batch_norm, dist::DdpOptions options, int steps = 20, int micro_batches = 1,
                     dist::GroupPtr group = nullptr, bool own_seeds = false) {
  if (!group) group = dist::world();
  int n = group->size(), r = group->rank();
  auto reference = small_cnn(batch_norm, own_seeds ? own_seed(group->world_ranks()[0]) : 7);
  sgd_steps(
      *reference,
      [&](int k, optim::Sgd&) {
        Data d = global_batch(k);
        cross_entropy((*reference)(d.images), d.labels).backward();
      },
      steps);

  auto ddp = std::make_shared<dist::DistributedDataParallel>(
      small_cnn(batch_norm, own_seeds ? own_seed(dist::info().rank) : 7), group, options);
  int64_t per_rank = kBatch / n;
  sgd_steps(
      *ddp,
      [&](int k, optim::Sgd&) {
        Data mine = rows(global_batch(k), r * per_rank, (r + 1) * per_rank);
        int64_t micro = per_rank / micro_batches;
        for (int m = 0; m < micro_batches; ++m) {
          Data part = rows(mine, m * micro, (m + 1) * micro);
          auto forward_backward = [&] {
            mul(cross_entropy((*ddp)(part.images), part.labels), 1.0f / static_cast<float>(micro_batches))
                .backward();
          };
          if (m + 1 < micro_batches) {
            auto guard = ddp->no_sync();  // accumulate locally; the last micro-batch synchronises
            forward_backward();
          } else {
            forward_backward();
          }
        }
      },
      steps);
  return max_relative_difference(ddp->module().state_dict(), reference->state_dict());
}

}  // namespace

TEST(Ddp, NRanksEqualOneRankForSeveralBucketSizes) {
  for (double cap : {0.0, 0.002, 0.01, 25.0}) {
    SCOPED_TRACE("bucket_cap_mb " + std::to_string(cap));
    EXPECT_LE(ddp_vs_single(false, {.bucket_cap_mb = cap}), 1e-5);
  }
}

TEST(Ddp, BucketsFollowReverseOrderThenArrivalOrder) {
  dist::DistributedDataParallel ddp(small_cnn(false), dist::world(), {.bucket_cap_mb = 0});
  const auto& buckets = ddp.reducer().buckets();
  ASSERT_EQ(buckets.size(), 8u);  // one per parameter
  EXPECT_EQ(buckets.front().params[0], "8.bias");
  EXPECT_EQ(buckets.back().params[0], "0.weight");
  for (auto& [name, p] : ddp.module().named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
}

TEST(Ddp, FirstBucketLaunchesBeforeBackwardEnds) {
  dist::DistributedDataParallel ddp(small_cnn(false), dist::world(), {.bucket_cap_mb = 0.002});
  Data d = global_batch(0);
  for (int k = 0; k < 2; ++k) {  // the second backward runs on the rebuilt buckets
    cross_entropy(ddp(d.images), d.labels).backward();
    const auto& launches = ddp.reducer().launch_times_ms();
    ASSERT_GE(launches.size(), 2u);
    EXPECT_LT(launches.front(), launches.back());
    EXPECT_LT(launches.front(), ddp.reducer().backward_end_ms());
  }
}

TEST(Ddp, NoSyncAccumulationEqualsOneRank) {
  EXPECT_LE(ddp_vs_single(false, {.bucket_cap_mb = 0.002}, 10, 2), 1e-5);
}

TEST(Ddp, SyncBatchNormEqualsOneRank) {
  EXPECT_LE(ddp_vs_single(true, {.bucket_cap_mb = 0.01, .sync_bn = true}, 10), 1e-5);
}

TEST(Ddp, UnusedParameterIsNamedOrAllowed) {
  Rng rng(1);
  auto used = std::make_shared<nn::Linear>(4, 3, rng);
  // A module that registers a parameter its forward never uses.
  struct WithSpare : nn::Module {
    std::shared_ptr<nn::Linear> used, spare;
    WithSpare(std::shared_ptr<nn::Linear> u, Rng& rng) : used(u), spare(std::make_shared<nn::Linear>(4, 3, rng)) {
      register_module("used", used);
      register_module("spare", spare);
    }
    Tensor forward(const Tensor& x) override { return used->forward(x); }
  };
  Tensor x = Tensor::full({2, 4}, 0.5f);
  Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 2}, {2});
  {
    dist::DistributedDataParallel ddp(std::make_shared<WithSpare>(used, rng), dist::world(), {});
    try {
      cross_entropy(ddp(x), y).backward();
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("'spare.weight'"));
      EXPECT_THAT(e.what(), HasSubstr("find_unused_parameters"));
    }
  }
  // Allowed with find_unused_parameters: UnusedParameterGetsZeroAndTheOthersTheAverageGradient.
}

TEST(Ddp, DifferentModelsAreAnErrorOnEveryRank) {
  auto group = dist::world();
  if (group->size() < 2) GTEST_SKIP() << "needs 2 or more ranks to differ";
  Rng rng(1);
  auto model = std::make_shared<nn::Sequential>();
  model->add(std::make_shared<nn::Linear>(4, group->rank() == 1 ? 5 : 3, rng));
  try {
    dist::DistributedDataParallel ddp(model, group, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("ranks 0 and 1"));
    EXPECT_THAT(e.what(), HasSubstr("'0.weight' [3, 4] on rank 0 and '0.weight' [5, 4] on rank 1"));
  }
}

// --- Replicas from different seeds, BatchNorm buffers without sync_bn, uneven shards,
// a proper sub-group, and the gradients with unused parameters.
namespace {

// Moves a BatchNorm's running statistics by a training-mode forward on data of `seed`, so
// that replicas built from different seeds differ in their buffers too.
void move_buffers(nn::Module& model, uint64_t seed) {
  autograd::NoGrad no_grad;
  Tensor x = Tensor::empty({4, 1, 8, 8});
  Rng(seed).fill_normal(x, 1, 2);
  model(x);
}

// "" when a and b hold the same names with bit-identical values, else the first difference.
std::string state_difference(const nn::NamedTensors& a, const nn::NamedTensors& b) {
  if (a.size() != b.size()) return std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " tensors";
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) return "'" + a[i].first + "' vs '" + b[i].first + "'";
    if (a[i].second.to_vector() != b[i].second.to_vector()) return "'" + a[i].first + "' differs";
  }
  return "";
}

std::vector<Tensor> clones(const nn::NamedTensors& tensors) {
  std::vector<Tensor> out;
  for (const auto& [name, t] : tensors) out.push_back(t.clone());
  return out;
}

void copy_into(const nn::NamedTensors& tensors, const std::vector<Tensor>& values) {
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].second.copy_from(values[i]);
}

// BatchNorm without sync_bn: each rank normalises with its own shard's statistics, so the
// parameters follow the average of per-shard gradients. The running statistics a rank
// holds after a step are those it started the step from, moved by its own shard: rank 0's
// of the step before (broadcast_buffers), or its own (without). The reference replays
// every shard from the right starting statistics and keeps what this rank must hold.
double ddp_local_batch_norm_vs_single(bool broadcast_buffers, int steps) {
  auto group = dist::world();
  const int n = group->size(), r = group->rank();
  const int64_t per_rank = kBatch / n;
  auto reference = small_cnn(true);
  const nn::NamedTensors buffers = reference->named_buffers();
  std::vector<Tensor> chain = clones(buffers);  // rank 0's (broadcast_buffers) or this rank's
  sgd_steps(
      *reference,
      [&](int k, optim::Sgd&) {
        Data d = global_batch(k);
        std::vector<Tensor> next_chain, mine;
        for (int s = 0; s < n; ++s) {
          copy_into(buffers, chain);
          Data shard = rows(d, s * per_rank, (s + 1) * per_rank);
          mul(cross_entropy((*reference)(shard.images), shard.labels), 1.0f / static_cast<float>(n))
              .backward();
          if (s == (broadcast_buffers ? 0 : r)) next_chain = clones(buffers);
          if (s == r) mine = clones(buffers);
        }
        chain = next_chain;
        copy_into(buffers, mine);
      },
      steps);

  auto ddp = std::make_shared<dist::DistributedDataParallel>(
      small_cnn(true), group,
      dist::DdpOptions{.bucket_cap_mb = 0.01, .broadcast_buffers = broadcast_buffers});
  sgd_steps(
      *ddp,
      [&](int k, optim::Sgd&) {
        Data mine = rows(global_batch(k), r * per_rank, (r + 1) * per_rank);
        cross_entropy((*ddp)(mine.images), mine.labels).backward();
      },
      steps);
  return max_relative_difference(ddp->module().state_dict(), reference->state_dict());
}

// A module that registers a parameter its forward never uses.
struct UsedAndSpare : nn::Module {
  std::shared_ptr<nn::Linear> used, spare;
  explicit UsedAndSpare(uint64_t seed) {
    Rng rng(seed);
    used = register_module("used", std::make_shared<nn::Linear>(4, 3, rng));
    spare = register_module("spare", std::make_shared<nn::Linear>(4, 3, rng));
  }
  Tensor forward(const Tensor& x) override { return used->forward(x); }
};

// Rank q's batch in round `round`: different on every rank, so averaging shows.
Data unused_test_batch(int q, int round) {
  Tensor x = Tensor::empty({3, 4});
  Rng(50 + 10 * round + q).fill_normal(x, 0, 1);
  return {x, Tensor::from_vector(std::vector<int64_t>{q % 3, (q + round) % 3, 2}, {3})};
}

}  // namespace

TEST(Ddp, ReplicasFromDifferentSeedsStartAsRankZeros) {
  auto group = dist::world();
  const int r = group->rank();
  auto mine = small_cnn(true, own_seed(r)), rank0 = small_cnn(true, own_seed(0));
  move_buffers(*mine, own_seed(r));
  move_buffers(*rank0, own_seed(0));
  if (r != 0) {
    ASSERT_NE(state_difference(mine->state_dict(), rank0->state_dict()), "")
        << "the seeds made equal replicas";
  }
  dist::DistributedDataParallel ddp(mine, group, {});
  EXPECT_EQ(state_difference(ddp.module().state_dict(), rank0->state_dict()), "");
}

TEST(Ddp, ReplicasFromDifferentSeedsTrainAsOneProcessFromRankZerosSeed) {
  EXPECT_LE(ddp_vs_single(false, {.bucket_cap_mb = 0.002}, 10, 1, nullptr, true), 1e-5);
}

TEST(Ddp, ProperSubGroupEqualsOneProcess) {
  // World rank 0 alone and ranks 1.. together (np 4: {0} and {1,2,3}), training at once,
  // each group from its members' own seeds against one process from its rank 0's seed.
  const int me = dist::info().rank;
  dist::GroupPtr group = dist::split(dist::world(), me == 0 ? 0 : 1, me);
  EXPECT_LE(ddp_vs_single(false, {.bucket_cap_mb = 0.002}, 10, 1, group, true), 1e-5);
  EXPECT_LE(ddp_vs_single(true, {.bucket_cap_mb = 0.01, .sync_bn = true}, 6, 1, group, true), 1e-5);
}

TEST(Ddp, BroadcastBuffersGiveRankZerosRunningStatistics) {
  EXPECT_LE(ddp_local_batch_norm_vs_single(true, 6), 1e-5);
}

TEST(Ddp, WithoutBroadcastBuffersEachRankKeepsItsOwnRunningStatistics) {
  EXPECT_LE(ddp_local_batch_norm_vs_single(false, 6), 1e-5);
}

TEST(Ddp, UnevenShardsSeeEverySampleAndMatchOneProcess) {
  // 23 samples over 2, 3 or 4 ranks. train_shard pads by wrapping around the epoch's order:
  // every rank gets ceil(23 / n) samples (so the same number of steps), every sample is
  // seen, and the first ceil(23 / n) * n - 23 of the order twice. Then DDP trains on
  // batches of 2 from a Loader over this rank's shard, against one process trained on the
  // ranks' batches side by side, each built by hand from the dataset.
  auto group = dist::world();
  const int n = group->size(), r = group->rank();
  const int64_t size = 23, batch = 2, per_rank = (size + n - 1) / n, pad = per_rank * n - size;
  const uint64_t seed = 5;
  const data::Dataset dataset = data::make_synthetic(1, 8, 8, 5, size, seed);
  auto reference = small_cnn(false);
  auto ddp = std::make_shared<dist::DistributedDataParallel>(small_cnn(false), group,
                                                             dist::DdpOptions{.bucket_cap_mb = 0.002});
  optim::Sgd sgd_ref(optim::param_groups(*reference, 1e-3f, false), {0.9f, true});
  optim::Sgd sgd_ddp(optim::param_groups(*ddp, 1e-3f, false), {0.9f, true});
  data::Loader loader(dataset, {.batch_size = batch, .drop_last = true, .prefetch = 1});
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    std::vector<std::vector<int64_t>> shards;
    for (int q = 0; q < n; ++q) shards.push_back(data::train_shard(size, seed, epoch, q, n, true));
    // How often each sample is seen, over the ranks (each counts its own shard).
    std::vector<int64_t> seen(size, 0), counted(size, 0);
    for (int64_t i : shards[r]) ++seen[i];
    for (int64_t i : data::eval_shard(size, r, n)) ++counted[i];
    Tensor seen_t = Tensor::from_vector(seen, {size}), counted_t = Tensor::from_vector(counted, {size});
    group->all_reduce(seen_t)->wait();
    group->all_reduce(counted_t)->wait();
    const std::vector<int64_t> order = data::shuffle_permutation(size, seed, epoch);
    for (int64_t k = 0; k < size; ++k) {
      EXPECT_EQ(seen_t.data<int64_t>()[order[k]], k < pad ? 2 : 1)
          << "sample " << order[k] << ", " << k << "th of the epoch's order";
      EXPECT_EQ(counted_t.data<int64_t>()[k], 1) << "evaluation sample " << k;
    }
    loader.start_epoch(shards[r], epoch);
    Tensor steps = Tensor::from_vector(std::vector<int64_t>{loader.batches_per_epoch()}, {1});
    Tensor most = steps.clone();
    group->all_reduce(steps, dist::ReduceOp::min)->wait();
    group->all_reduce(most, dist::ReduceOp::max)->wait();
    ASSERT_EQ(steps.data<int64_t>()[0], per_rank / batch);  // the same on every rank: all stop here
    ASSERT_EQ(most.data<int64_t>()[0], per_rank / batch);
    for (int64_t k = 0; k < per_rank / batch; ++k) {
      data::Batch mine;
      ASSERT_TRUE(loader.next(mine));
      sgd_ddp.zero_grad();
      cross_entropy((*ddp)(mine.images), mine.labels).backward();
      sgd_ddp.step(0.05f);

      Tensor x = Tensor::empty({batch * n, 1, 8, 8});
      std::vector<int64_t> y;
      for (int q = 0; q < n; ++q)
        for (int64_t j = 0; j < batch; ++j) {
          const int64_t sample = shards[q][k * batch + j];
          data::dataset_sample_to_float(dataset, sample, x.data<float>() + (q * batch + j) * 64);
          y.push_back(dataset.labels[sample]);
        }
      sgd_ref.zero_grad();
      cross_entropy((*reference)(x), Tensor::from_vector(y, {batch * n})).backward();
      sgd_ref.step(0.05f);
    }
    data::Batch extra;
    EXPECT_FALSE(loader.next(extra)) << "the loader has more batches than batches_per_epoch()";
  }
  EXPECT_LE(max_relative_difference(ddp->module().state_dict(), reference->state_dict()), 1e-5);
}

TEST(Ddp, UnusedParameterGetsZeroAndTheOthersTheAverageGradient) {
  // Both rounds, with one bucket per parameter and with one bucket for all: the second on
  // the buckets rebuilt in arrival order, where the unused parameter comes last.
  auto group = dist::world();
  const int n = group->size(), r = group->rank();
  for (double cap : {0.0, 25.0}) {
    SCOPED_TRACE("bucket_cap_mb " + std::to_string(cap));
    dist::DistributedDataParallel ddp(std::make_shared<UsedAndSpare>(1), group,
                                      {.bucket_cap_mb = cap, .find_unused_parameters = true});
    UsedAndSpare reference(1);
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      for (const Tensor& p : ddp.module().parameters()) p.grad().zero_();
      Data mine = unused_test_batch(r, round);
      cross_entropy(ddp(mine.images), mine.labels).backward();
      for (const Tensor& p : reference.parameters()) p.set_grad(Tensor());
      for (int q = 0; q < n; ++q) {  // the gradient averaged over the ranks' batches
        Data theirs = unused_test_batch(q, round);
        mul(cross_entropy(reference(theirs.images), theirs.labels), 1.0f / static_cast<float>(n)).backward();
      }
      nn::NamedTensors got = ddp.module().named_parameters(), want = reference.named_parameters();
      for (size_t i = 0; i < got.size(); ++i) {
        const std::string& name = got[i].first;
        std::vector<float> g = got[i].second.grad().to_vector();
        if (name.rfind("spare.", 0) == 0) {
          EXPECT_EQ(g, std::vector<float>(g.size(), 0.0f)) << name;
          continue;
        }
        std::vector<float> w = want[i].second.grad().to_vector();
        for (size_t j = 0; j < g.size(); ++j) EXPECT_NEAR(g[j], w[j], 1e-6 + 1e-5 * std::abs(w[j])) << name;
      }
    }
  }
}
