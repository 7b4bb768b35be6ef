// DistributedDataParallel under mpirun -np N: N ranks at batch B/N must end with the
// same parameters as one process at batch B (each rank also trains that one-process
// reference itself, so the check needs nothing but the run), for several bucket sizes,
// with no_sync accumulation, and with synchronised batch-norm; plus overlap, unused
// parameters and mismatched models; replicas built from different seeds (the initial
// broadcast), BatchNorm buffers without sync_bn, a data set that does not divide by the
// world size, and DDP on a proper sub-group; rank-dependent unused parameters beside
// sync_bn, and the steps after an error in backward; a second backward since the last
// forward, an error on every rank; DDP's buckets through the hierarchical all-reduce, with
// and without bf16 between hosts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "autograd/node.h"
#include "datasets/loader.h"
#include "datasets/sampler.h"
#include "datasets/shuffle.h"
#include "datasets/synthetic.h"
#include "comm/comm_thread.h"
#include "parallel/ddp.h"
#include "comm/dist.h"
#include "comm/mpi_process_group.h"
#include "error_of.h"
#include "nn/layers.h"
#include "nn/sequential.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/shape.h"
#include "optim/sgd.h"
#include "state_difference.h"
#include "step_batches.h"

using namespace dpt;
using dpt::testing::Data;
using dpt::testing::error_of;
using dpt::testing::state_difference;
using dpt::testing::global_batch;
using dpt::testing::kBatch;
using dpt::testing::rows;
using ::testing::HasSubstr;

namespace {

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

namespace {

// A copy of the world whose all_reduce is hierarchical: across the real hosts under
// tools/cluster.sh; on one machine across simulated ones (world rank r on host r % 2, or
// r % 3 for an odd world: MpiProcessGroup::make_host_groups).
dist::GroupPtr hierarchical_world() {
  const int n = dist::world()->size(), r = dist::world()->rank();
  dist::GroupPtr group = dist::split(dist::world(), 0, r);
  auto& mpi = dynamic_cast<dist::MpiProcessGroup&>(*group);
  if (!mpi.host_groups().across) mpi.make_host_groups(r % (n % 2 == 0 ? 2 : n));
  mpi.set_hierarchical(dist::Hierarchical::on);
  return group;
}

// The number of collectives `group` has made, counted by a barrier's number.
int64_t collectives_made(const dist::GroupPtr& group) {
  dist::WorkPtr work = group->barrier();
  work->wait();
  const std::string text = dynamic_cast<dist::CommTask&>(*work).describe();
  return std::stoll(text.substr(text.rfind('#') + 1)) - 1;
}

}  // namespace

// DDP's buckets through the hierarchical all-reduce: 20 steps as one rank, within f32
// rounding; with bf16 between hosts, one step's gradients within bf16 rounding of one rank's
// (and not equal: they did travel as bf16), each bucket through the across group.
TEST(Ddp, HierarchicalAndCompressedBucketsEqualOneRank) {
  if (dist::world()->size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  dist::GroupPtr group = hierarchical_world();
  EXPECT_LE(ddp_vs_single(false, {.bucket_cap_mb = 0.002}, 20, 1, group), 1e-5);

  const int n = group->size(), r = group->rank();
  const int64_t per_rank = kBatch / n;
  auto reference = small_cnn(false);
  Data global = global_batch(0), mine = rows(global, r * per_rank, (r + 1) * per_rank);
  cross_entropy((*reference)(global.images), global.labels).backward();
  dist::DistributedDataParallel ddp(small_cnn(false), group,
                                    {.bucket_cap_mb = 0.002, .compress = dist::Compression::bf16});
  const dist::GroupPtr& across = dynamic_cast<dist::MpiProcessGroup&>(*group).host_groups().across;
  const int64_t across_before = collectives_made(across);
  cross_entropy(ddp(mine.images), mine.labels).backward();
  const double difference = max_relative_difference(gradients(ddp.module()), gradients(*reference));
  EXPECT_LE(difference, 1e-2);
  EXPECT_GT(difference, 1e-6) << "the gradients equal the f32 ones: they did not travel as bf16";
  // Two collectives of the across group per bucket (all_to_all, all_gather) and the barrier.
  EXPECT_GE(collectives_made(across), across_before + 2 * 2 + 1);
}

TEST(Ddp, BucketsFollowReverseOrderThenArrivalOrder) {
  dist::DistributedDataParallel ddp(small_cnn(false), dist::world(), {.bucket_cap_mb = 0});
  const auto& buckets = ddp.reducer().buckets();
  ASSERT_EQ(buckets.size(), 8u);  // one per parameter
  EXPECT_EQ(buckets.front().params[0], "8.bias");
  EXPECT_EQ(buckets.back().params[0], "0.weight");
  for (auto& [name, p] : ddp.module().named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
}

TEST(Ddp, ACommHookDecidesWhatTheGradientsBecome) {
  // A hook that takes the maximum over the ranks instead of the mean: each .grad must be the
  // element-wise maximum of the ranks' own gradients, computed here without DDP and
  // all-reduced by hand. One hook call per bucket per backward.
  const int rank = dist::world()->rank();
  Data d = global_batch(1);
  Data mine = rows(d, rank * 2, rank * 2 + 2);  // rank-dependent rows
  auto plain = small_cnn(false);
  cross_entropy((*plain)(mine.images), mine.labels).backward();
  dist::DistributedDataParallel ddp(small_cnn(false), dist::world(), {.bucket_cap_mb = 0.001});
  int calls = 0;
  ddp.register_comm_hook([&](dist::ProcessGroup& group, const Tensor& bucket) {
    ++calls;
    return group.all_reduce(bucket, dist::ReduceOp::max);
  });
  cross_entropy(ddp(mine.images), mine.labels).backward();
  EXPECT_EQ(calls, static_cast<int>(ddp.reducer().buckets().size()));
  EXPECT_GE(calls, 2);
  auto want = plain->named_parameters();
  auto got = ddp.module().named_parameters();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    Tensor expected = want[i].second.grad().clone();
    dist::world()->all_reduce(expected, dist::ReduceOp::max)->wait();
    EXPECT_EQ(got[i].second.grad().to_vector(), expected.to_vector()) << want[i].first;
  }
}

// A module whose parameters are registered in another order than backward reaches them:
// "head" first, though the forward runs body before head.
struct HeadRegisteredFirst : nn::Module {
  std::shared_ptr<nn::Linear> head, body;
  explicit HeadRegisteredFirst(Rng& rng)
      : head(std::make_shared<nn::Linear>(4, 3, rng)), body(std::make_shared<nn::Linear>(4, 4, rng)) {
    register_module("head", head);
    register_module("body", body);
  }
  Tensor forward(const Tensor& x) override { return head->forward(body->forward(x)); }
};

TEST(Ddp, BucketsAreRebuiltInTheOrderGradientsArrived) {
  Rng rng(3);
  dist::DistributedDataParallel ddp(std::make_shared<HeadRegisteredFirst>(rng), dist::world(), {.bucket_cap_mb = 0});
  auto names_of = [&](size_t first, size_t count) {
    std::set<std::string> names;
    for (size_t b = first; b < first + count; ++b) names.insert(ddp.reducer().buckets()[b].params.at(0));
    return names;
  };
  const std::set<std::string> head = {"head.weight", "head.bias"}, body = {"body.weight", "body.bias"};
  ASSERT_EQ(ddp.reducer().buckets().size(), 4u);  // one per parameter
  // Reverse registration order first: body's parameters (registered last) lead.
  EXPECT_EQ(names_of(0, 2), body);
  EXPECT_EQ(names_of(2, 2), head);
  Tensor x = Tensor::full({2, 4}, 0.5f);
  Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 2}, {2});
  cross_entropy(ddp(x), y).backward();
  // Backward reaches head first: the rebuilt buckets follow it.
  EXPECT_EQ(names_of(0, 2), head);
  EXPECT_EQ(names_of(2, 2), body);
}

TEST(Ddp, FirstBucketHoldsAboutOneMegabyteAndLaunchesFirst) {
  // Five 256x256 layers, 257 KiB each with the bias (5 x 263,168 bytes): backward reaches
  // layer 4 first, so the first bucket is the shortest run of parameters from there that
  // holds 1 MiB, and the rest (layer 0 among them) go to the second.
  Rng rng(5);
  auto net = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 5; ++i) net->add(std::make_shared<nn::Linear>(256, 256, rng));
  dist::DistributedDataParallel ddp(net, dist::world(), {});
  const int64_t mib = 1 << 20, layer_bytes = (256 * 256 + 256) * 4;
  auto bytes_of = [](const std::string& name) -> int64_t {
    return name.ends_with(".weight") ? 256 * 256 * 4 : 256 * 4;
  };
  for (int k = 0; k < 2; ++k) {  // the second backward runs on the rebuilt buckets
    const auto& buckets = ddp.reducer().buckets();
    ASSERT_EQ(buckets.size(), 2u);
    EXPECT_GE(buckets[0].bytes(), mib);
    EXPECT_LT(buckets[0].bytes() - bytes_of(buckets[0].params.back()), mib);
    EXPECT_EQ(buckets[0].bytes() + buckets[1].bytes(), 5 * layer_bytes);
    EXPECT_EQ(buckets[0].params.front().substr(0, 2), "4.");
    std::set<std::string> second(buckets[1].params.begin(), buckets[1].params.end());
    EXPECT_TRUE(second.count("0.weight") && second.count("0.bias"));
    Tensor x = Tensor::full({8, 256}, 0.25f);
    Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
    cross_entropy(ddp(x), y).backward();
    const auto& launches = ddp.reducer().launch_times_ms();
    ASSERT_EQ(launches.size(), 2u);
    EXPECT_LE(launches[0], launches[1]);
    EXPECT_LT(launches[0], ddp.reducer().backward_end_ms());
  }
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
  // Allowed with find_unused_parameters: UnusedParameterGetsZeroAndTheOthersTheAverageGradient.
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

// Two forwards, then both backwards, before the step: the first backward all-reduces, the
// second would leave its gradients local and the replicas apart. Every rank stops at the
// second backward's first gradient with the same line, before any collective of it, so none
// waits for another (a collective left waiting would fail within the 30 s timeout); the
// steps after it synchronise: every rank gets the gradients of one process on the whole batch.
TEST(Ddp, ASecondBackwardSinceTheLastForwardIsAnErrorOnEveryRank) {
  auto group = dist::world();
  const int n = group->size(), r = group->rank();
  const int64_t per_rank = kBatch / n;
  TimeoutForThisTest timeout(30);
  dist::DistributedDataParallel ddp(small_cnn(false), group, {.bucket_cap_mb = 0.002});
  auto reference = small_cnn(false);

  Data first = rows(global_batch(0), r * per_rank, (r + 1) * per_rank);
  Data second = rows(global_batch(1), r * per_rank, (r + 1) * per_rank);
  Tensor l1 = cross_entropy(ddp(first.images), first.labels);
  Tensor l2 = cross_entropy(ddp(second.images), second.labels);
  l1.backward();
  const std::string error = error_of([&] { l2.backward(); });
  EXPECT_EQ(error,
            "DDP on world: a second backward since the last forward (its gradients would not be all-reduced, "
            "and the replicas would part); run one forward per backward, or accumulate gradients with every "
            "forward but the last under no_sync()");
  Tensor raised = Tensor::from_vector(std::vector<float>{error.empty() ? 0.0f : 1.0f}, {1});
  group->all_reduce(raised, dist::ReduceOp::sum)->wait();
  EXPECT_EQ(raised.item(), static_cast<float>(n)) << "ranks that raised it";

  for (int step = 2; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    Data global = global_batch(step);
    Data mine = rows(global, r * per_rank, (r + 1) * per_rank);
    zero_gradients(ddp);
    cross_entropy(ddp(mine.images), mine.labels).backward();
    zero_gradients(*reference);
    cross_entropy((*reference)(global.images), global.labels).backward();
    EXPECT_LE(max_relative_difference(gradients(ddp.module()), gradients(*reference)), 1e-5);
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
// holds after a step are rank 0's, moved by rank 0's shard, on every rank
// (broadcast_buffers: broadcast after the forward), or its own moved by its own shard
// (without). The reference replays every shard from the right starting statistics and
// keeps what this rank must hold.
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
        std::vector<Tensor> next_chain;
        for (int s = 0; s < n; ++s) {
          copy_into(buffers, chain);
          Data shard = rows(d, s * per_rank, (s + 1) * per_rank);
          mul(cross_entropy((*reference)(shard.images), shard.labels), 1.0f / static_cast<float>(n))
              .backward();
          if (s == (broadcast_buffers ? 0 : r)) next_chain = clones(buffers);
        }
        chain = next_chain;
        copy_into(buffers, chain);
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

TEST(Ddp, EvenAndOddSubGroupsEachEqualOneProcess) {
  // The example's sub-groups (np 8: {0, 2, 4, 6} and {1, 3, 5, 7}), made with new_group and
  // training at once, each against one process on the same global batch.
  const int np = dist::info().world_size, me = dist::info().rank;
  if (np < 2) GTEST_SKIP() << "needs 2 or more ranks for two parity groups";
  std::vector<int> even, odd;
  for (int r = 0; r < np; ++r) (r % 2 == 0 ? even : odd).push_back(r);
  dist::GroupPtr evens = dist::new_group(even), odds = dist::new_group(odd);
  dist::GroupPtr group = me % 2 == 0 ? evens : odds;
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->rank(), me / 2);
  if (kBatch % group->size() != 0) GTEST_SKIP() << "the global batch " << kBatch << " does not split over " << group->size();
  EXPECT_LE(ddp_vs_single(false, {.bucket_cap_mb = 0.002}, 10, 1, group), 1e-5);
}

TEST(Ddp, BroadcastBuffersGiveRankZerosRunningStatistics) {
  EXPECT_LE(ddp_local_batch_norm_vs_single(true, 6), 1e-5);
}

TEST(Ddp, WithoutBroadcastBuffersEachRankKeepsItsOwnRunningStatistics) {
  EXPECT_LE(ddp_local_batch_norm_vs_single(false, 6), 1e-5);
}

// The collectives of a DDP step as the process groups count them (dist::collective_counts),
// against what the model implies: with bucket_cap_mb 0 one all-reduce per parameter (the
// first step also broadcasts rank 0's bucket order), plus one broadcast of all the
// batch-norm buffers (f32: one flat buffer) per training forward, or none without
// broadcast_buffers; the bytes are every gradient once and every buffer once per forward.
// A forward under no_sync leaves its broadcast to the next forward. After the steps every
// rank holds rank 0's buffers, bit for bit (and without broadcast_buffers they differ, so
// the check can fail).
TEST(Ddp, AStepMakesOneAllReducePerBucketAndOneBufferBroadcast) {
  auto group = dist::world();
  const int n = group->size(), r = group->rank();
  const int64_t per_rank = kBatch / n;
  for (bool broadcast_buffers : {true, false}) {
    SCOPED_TRACE(broadcast_buffers ? "broadcast_buffers" : "without broadcast_buffers");
    auto ddp = std::make_shared<dist::DistributedDataParallel>(
        small_cnn(true), group, dist::DdpOptions{.bucket_cap_mb = 0, .broadcast_buffers = broadcast_buffers});
    int64_t params = 0, param_bytes = 0, buffer_bytes = 0;
    for (const auto& [name, t] : ddp->module().named_parameters()) {
      ++params;
      param_bytes += 4 * t.numel();
    }
    for (const auto& [name, t] : ddp->module().named_buffers()) buffer_bytes += 4 * t.numel();
    ASSERT_GT(buffer_bytes, 0);
    const int64_t broadcasts = broadcast_buffers ? 1 : 0;
    sgd_steps(
        *ddp,
        [&](int k, optim::Sgd&) {
          const dist::CollectiveCounts before = dist::collective_counts();
          Data mine = rows(global_batch(k), r * per_rank, (r + 1) * per_rank);
          const int micro_batches = k == 3 ? 2 : 1;  // the last step accumulates two
          for (int m = 0; m < micro_batches; ++m) {
            Data part = micro_batches == 1 ? mine : rows(mine, m * per_rank / 2, (m + 1) * per_rank / 2);
            if (m + 1 < micro_batches) {
              auto no_sync = ddp->no_sync();
              cross_entropy((*ddp)(part.images), part.labels).backward();
            } else {
              cross_entropy((*ddp)(part.images), part.labels).backward();
            }
          }
          const dist::CollectiveCounts step = dist::collective_counts() - before;
          EXPECT_EQ(step.collectives, params + (k == 0 ? 1 : 0) + micro_batches * broadcasts) << "step " << k;
          EXPECT_EQ(step.bytes,
                    param_bytes + (k == 0 ? 8 * params : 0) + micro_batches * broadcasts * buffer_bytes)
              << "step " << k;
        },
        4);
    for (const auto& [name, t] : ddp->module().named_buffers()) {
      Tensor rank0 = t.clone();
      group->broadcast(rank0, 0)->wait();
      if (broadcast_buffers || r == 0)
        EXPECT_EQ(t.to_vector(), rank0.to_vector()) << "'" << name << "' differs from rank 0's";
      else
        EXPECT_NE(t.to_vector(), rank0.to_vector()) << "'" << name << "' equals rank 0's";
    }
  }
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
