// DistributedDataParallel under mpirun -np N: N ranks at batch B/N must end with the
// same parameters as one process at batch B (each rank also trains that one-process
// reference itself, so the check needs nothing but the run), for several bucket sizes,
// with no_sync accumulation, and with synchronised batch-norm; plus overlap, unused
// parameters (also rank-dependent ones beside sync_bn), recovery from an error in backward
// and mismatched models.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/node.h"
#include "distributed/ddp.h"
#include "distributed/dist.h"
#include "distributed/mpi_process_group.h"
#include "error_of.h"
#include "nn/layers.h"
#include "nn/sequential.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/shape.h"
#include "optim/sgd.h"

using namespace dpt;
using dpt::testing::error_of;
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

nn::NamedTensors gradients(nn::Module& model) {
  nn::NamedTensors out;
  for (auto& [name, p] : model.named_parameters()) out.emplace_back(name, p.grad());
  return out;
}

void zero_gradients(nn::Module& model) {
  for (auto& [name, p] : model.named_parameters())
    if (p.grad().defined()) p.grad().zero_();
}

// Identity forward; its backward throws while *armed: an op that fails in backward.
Tensor fails_in_backward(const Tensor& x, const std::shared_ptr<bool>& armed) {
  Tensor out = x.detach().clone();
  autograd::record("fails_in_backward", out, {x}, [armed](const Tensor& g) {
    DPT_CHECK(!*armed) << "fails_in_backward: the op's own error";
    return std::vector<Tensor>{g};
  });
  return out;
}

// Two linear layers with that op between them: backward reaches `second`'s gradients, and
// DDP launches their buckets, before it fails.
struct FailsInBackward : nn::Module {
  std::shared_ptr<nn::Linear> first, second;
  std::shared_ptr<bool> armed = std::make_shared<bool>(false);
  explicit FailsInBackward(Rng rng)
      : first(std::make_shared<nn::Linear>(6, 8, rng)), second(std::make_shared<nn::Linear>(8, 3, rng)) {
    register_module("first", first);
    register_module("second", second);
  }
  Tensor forward(const Tensor& x) override {
    return second->forward(fails_in_backward(relu(first->forward(x)), armed));
  }
};

Data linear_batch(int step) {
  Tensor x = Tensor::empty({kBatch, 6});
  Rng(200 + step).fill_normal(x, 0, 1);
  std::vector<int64_t> y(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) y[i] = (i * 5 + step) % 3;
  return {x, Tensor::from_vector(y, {kBatch})};
}

Data linear_rows(const Data& d, int64_t begin, int64_t end) {
  Tensor x = d.images.as_strided({end - begin, 6}, {6, 1}, d.images.offset() + begin * 6);
  Tensor y = d.labels.as_strided({end - begin}, {1}, d.labels.offset() + begin);
  return {x, y};
}

// Sets every group's collective timeout for one test, so a collective that some rank
// never matches fails the test within `seconds` instead of hanging it. 30 s: these tests'
// collectives take milliseconds, and well under that with 4 ranks on 2 busy cores.
class TimeoutForThisTest {
 public:
  explicit TimeoutForThisTest(double seconds)
      : previous_(dynamic_cast<dist::MpiProcessGroup&>(*dist::world()).timeout()) {
    dist::set_timeout(seconds);
  }
  ~TimeoutForThisTest() { dist::set_timeout(static_cast<double>(previous_.count()) / 1000.0); }

 private:
  std::chrono::milliseconds previous_;
};

// A batch-normalised convolution and two heads, of which the forward uses one: `head_a`
// on rank 0, `head_b` on the others. The other head's parameters get no gradient there.
struct RankBranch : nn::Module {
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Linear> head_a, head_b;
  int rank = 0;
  explicit RankBranch(Rng rng)
      : conv(std::make_shared<nn::Conv2d>(1, 4, 3, rng, Conv2dOptions{.padding = 1}, false)),
        bn(std::make_shared<nn::BatchNorm2d>(4)),
        head_a(std::make_shared<nn::Linear>(4 * 8 * 8, 5, rng)),
        head_b(std::make_shared<nn::Linear>(4 * 8 * 8, 5, rng)) {
    register_module("conv", conv);
    register_module("bn", bn);
    register_module("head_a", head_a);
    register_module("head_b", head_b);
  }
  Tensor features(const Tensor& x) { return flatten(relu(bn->forward(conv->forward(x)))); }
  Tensor forward(const Tensor& x) override {
    Tensor h = features(x);
    return rank == 0 ? head_a->forward(h) : head_b->forward(h);
  }
};

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
    WithSpare(std::shared_ptr<nn::Linear> u, Rng& rng)
        : used(u), spare(std::make_shared<nn::Linear>(4, 3, rng)) {
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

// An op that throws in backward on every rank, with some of the step's all-reduces in
// flight: the error is the op's own, the all-reduces in flight end with it (none is left
// to overwrite the gradients zeroed after it), and the steps after it synchronise: every
// rank gets the gradients of one process on the whole batch.
TEST(Ddp, AnErrorInBackwardLeavesTheNextStepsSynchronised) {
  auto group = dist::world();
  const int n = group->size(), r = group->rank();
  const int64_t per_rank = kBatch / n;
  TimeoutForThisTest timeout(30);
  auto model = std::make_shared<FailsInBackward>(Rng(3));
  FailsInBackward reference(Rng(3));
  dist::DistributedDataParallel ddp(model, group, {.bucket_cap_mb = 0});

  *model->armed = true;
  Data shard = linear_rows(linear_batch(0), r * per_rank, (r + 1) * per_rank);
  EXPECT_EQ(error_of([&] { cross_entropy(ddp(shard.images), shard.labels).backward(); }),
            "fails_in_backward: the op's own error");
  // It failed with the all-reduces of `second`'s two gradients (one bucket each) in flight.
  const std::vector<double>& launches = ddp.reducer().launch_times_ms();
  ASSERT_GE(launches.size(), 2u);
  EXPECT_LT(launches[1], ddp.reducer().backward_end_ms());

  *model->armed = false;
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    Data global = linear_batch(step);
    Data mine = linear_rows(global, r * per_rank, (r + 1) * per_rank);
    zero_gradients(ddp);
    cross_entropy(ddp(mine.images), mine.labels).backward();
    zero_gradients(reference);
    cross_entropy(reference(global.images), global.labels).backward();
    EXPECT_LE(max_relative_difference(gradients(ddp.module()), gradients(reference)), 1e-5);
  }
}

// find_unused_parameters with parameters unused on some ranks only, beside sync_bn's
// all-reduces in backward: every rank must issue the bucket all-reduces at the same place
// among those, or the collectives pair up wrongly (wrong gradients, or a wait that times
// out). Checked against one process computing each rank's head on its rows.
TEST(Ddp, RankDependentUnusedParametersBesideSyncBatchNorm) {
  auto group = dist::world();
  const int n = group->size(), r = group->rank();
  const int64_t per_rank = kBatch / n;
  TimeoutForThisTest timeout(30);
  auto model = std::make_shared<RankBranch>(Rng(5));
  model->rank = r;
  RankBranch reference(Rng(5));
  dist::DistributedDataParallel ddp(model, group,
                                    {.bucket_cap_mb = 0, .find_unused_parameters = true, .sync_bn = true});
  // Rank 0's rows go through head_a, the others' through head_b: masks pick each row's head.
  std::vector<float> on_rank0(kBatch * 5, 0.0f), elsewhere(kBatch * 5, 1.0f);
  for (int64_t i = 0; i < per_rank * 5; ++i) on_rank0[i] = 1.0f, elsewhere[i] = 0.0f;
  Tensor mask_a = Tensor::from_vector(on_rank0, {kBatch, 5}),
         mask_b = Tensor::from_vector(elsewhere, {kBatch, 5});
  for (int step = 0; step < 3; ++step) {  // the buckets are rebuilt after the first
    SCOPED_TRACE("step " + std::to_string(step));
    Data global = global_batch(step);
    Data mine = rows(global, r * per_rank, (r + 1) * per_rank);
    zero_gradients(ddp);
    cross_entropy(ddp(mine.images), mine.labels).backward();
    zero_gradients(reference);
    Tensor h = reference.features(global.images);
    Tensor logits = add(mul(reference.head_a->forward(h), mask_a), mul(reference.head_b->forward(h), mask_b));
    cross_entropy(logits, global.labels).backward();
    EXPECT_LE(max_relative_difference(gradients(ddp.module()), gradients(reference)), 1e-5);
  }
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
