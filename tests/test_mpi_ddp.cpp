// DistributedDataParallel under mpirun -np N: N ranks at batch B/N must end with the
// same parameters as one process at batch B (each rank also trains that one-process
// reference itself, so the check needs nothing but the run), for several bucket sizes,
// with no_sync accumulation, and with synchronised batch-norm; plus overlap, unused
// parameters and mismatched models.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

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

// Trains the DDP replicas on shards and a local reference on the whole batch.
double ddp_vs_single(bool batch_norm, dist::DdpOptions options, int steps = 20, int micro_batches = 1) {
  auto group = dist::world();
  int n = group->size(), r = group->rank();
  auto reference = small_cnn(batch_norm);
  sgd_steps(
      *reference,
      [&](int k, optim::Sgd&) {
        Data d = global_batch(k);
        cross_entropy((*reference)(d.images), d.labels).backward();
      },
      steps);

  auto ddp = std::make_shared<dist::DistributedDataParallel>(small_cnn(batch_norm), group, options);
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
  dist::DistributedDataParallel ddp(std::make_shared<WithSpare>(used, rng), dist::world(),
                                    {.find_unused_parameters = true});
  cross_entropy(ddp(x), y).backward();
  cross_entropy(ddp(x), y).backward();
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
