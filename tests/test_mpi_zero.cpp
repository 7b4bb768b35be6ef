// ZeRO-1 (parallel/zero.h) under mpirun -np N: N ranks at batch B/N with the optimizer
// state sharded must give the losses and the final weights of one process at batch B (each
// rank also trains that one-process reference itself), for SGD with momentum and weight
// decay (no decay on the 1-D parameters), AdamW, and an EMA; bucket sizes that do not
// divide by N (and a bucket smaller than N: a rank with an empty chunk). At np 2, where
// averaging two numbers is the same sum however it is done, against plain DDP bit for bit.
// A sharded checkpoint holds the state whole and resumes unsharded and at another world
// size; the non-finite verdict, checked on each rank's own shard, is the same on every rank.
// With the all-gather left in flight by step() and waited for layer by layer in the next
// forward, training is bit for bit what it is with the gather waited for in step().
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "autograd/node.h"
#include "core/rng.h"
#include "parallel/ddp.h"
#include "comm/dist.h"
#include "parallel/zero.h"
#include "error_of.h"
#include "io/checkpoint.h"
#include "nn/layers.h"
#include "nn/sequential.h"
#include "ops/loss.h"
#include "optim/adamw.h"
#include "optim/ema.h"
#include "optim/nonfinite.h"
#include "optim/sgd.h"
#include "step_batches.h"
#include "temp_dir.h"

using namespace dpt;
using dpt::testing::Data;
using dpt::testing::global_batch;
using dpt::testing::kBatch;
using dpt::testing::rows;
using ::testing::HasSubstr;

namespace {

constexpr float kLr = 0.05f;

// Parameter sizes 27, 3, 3, 135, 5, 560, 7, 35, 5: none divides by 2, 3 and 4 at once, and
// batch-norm's 3 leave a rank with nothing at np 4 when each parameter is its own bucket.
nn::ModulePtr small_cnn() {
  Rng rng(7);
  auto net = std::make_shared<nn::Sequential>();
  net->add(std::make_shared<nn::Conv2d>(1, 3, 3, rng, Conv2dOptions{.padding = 1}, false))
      .add(std::make_shared<nn::BatchNorm2d>(3))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Conv2d>(3, 5, 3, rng, Conv2dOptions{.padding = 1}))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::Flatten>())
      .add(std::make_shared<nn::Linear>(5 * 4 * 4, 7, rng))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::Linear>(7, 5, rng));
  return net;
}

// Rank r of n's rows of step k's global batch.
Data rank_batch(int step, int r, int n) {
  const int64_t per = kBatch / n;
  return rows(global_batch(step), r * per, (r + 1) * per);
}

enum class Rule { sgd, adamw };

std::unique_ptr<optim::Optimizer> make_rule(Rule rule, std::vector<optim::ParamGroup> groups) {
  if (rule == Rule::adamw) return std::make_unique<optim::AdamW>(std::move(groups), optim::AdamWOptions{});
  return std::make_unique<optim::Sgd>(std::move(groups), optim::SgdOptions{0.9f, false});
}

// Weight decay on the weights, none on biases and batch-norm parameters.
std::vector<optim::ParamGroup> groups_of(const nn::Module& model) {
  return optim::param_groups(model, 0.01f, true);
}

// A model and its optimizer: one process (`group` null), plain DDP, or DDP with ZeRO-1
// (synchronised batch norm, so that N ranks normalise as one process does).
struct Training {
  nn::ModulePtr net, model;  // model: what forward calls (DDP or net)
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::Ema> ema;
  dist::GroupPtr group;

  Training(Rule rule, dist::GroupPtr g, bool shard, double bucket_cap_mb = 25.0, bool with_ema = false,
           bool gather_in_forward = false)
      : net(small_cnn()), model(net), group(std::move(g)) {
    if (group) {
      auto ddp = std::make_shared<dist::DistributedDataParallel>(
          net, group,
          dist::DdpOptions{.bucket_cap_mb = bucket_cap_mb, .sync_bn = true, .shard_gradients = shard});
      model = ddp;
      if (shard) {
        auto zero = std::make_unique<dist::ZeroOptimizer>(
            *ddp, groups_of(*net),
            [rule](std::vector<optim::ParamGroup> gs) { return make_rule(rule, std::move(gs)); });
        if (gather_in_forward) {
          EXPECT_TRUE(zero->gather_during_forward());
        }
        optimizer = std::move(zero);
      }
    }
    if (!optimizer) optimizer = make_rule(rule, groups_of(*net));
    if (with_ema) ema = std::make_unique<optim::Ema>(*net, 0.9f);
  }

  // Trains steps [first, first + count); returns each step's loss over the global batch
  // (the ranks' mean).
  std::vector<float> train(int first, int count) {
    std::vector<float> losses;
    for (int k = first; k < first + count; ++k) {
      const Data d = group ? rank_batch(k, group->rank(), group->size()) : global_batch(k);
      Tensor loss = cross_entropy((*model)(d.images), d.labels);
      optimizer->zero_grad();
      loss.backward();
      optimizer->step(kLr);
      if (ema) {
        optimizer->parameters_ready();
        ema->update(*net);
      }
      Tensor mean = loss.detach().clone();
      if (group) group->all_reduce(mean, dist::ReduceOp::avg)->wait();
      losses.push_back(mean.item());
    }
    return losses;
  }
  io::TrainingObjects objects() {
    return {*net, "small_cnn", *optimizer, optimizer->state_kinds().size() == 2 ? "adamw" : "sgd", ema.get()};
  }
};

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t j = 0; j < std::min(a.size(), b.size()); ++j) {
    diff = std::max(diff, static_cast<double>(std::abs(a[j] - b[j])));
    scale = std::max(scale, static_cast<double>(std::abs(b[j])));
  }
  return diff / scale;
}

std::vector<float> flat(const nn::NamedTensors& tensors) {
  std::vector<float> out;
  for (const auto& [name, t] : tensors) {
    std::vector<float> v = t.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// The optimizer's whole state, flat, in state_for_save order (on the group's rank 0).
std::vector<float> saved_state(optim::Optimizer& optimizer) {
  std::vector<float> out;
  for (const auto& s : optimizer.state_for_save()) {
    std::vector<float> v = s.value.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Checks ZeRO-1 against one process (losses, weights, whole optimizer state, EMA) and,
// at np 2, against plain DDP bit for bit.
void expect_zero_matches(Rule rule, double bucket_cap_mb, bool with_ema) {
  auto world = dist::world();
  Training one(rule, nullptr, false, bucket_cap_mb, with_ema);
  Training zero(rule, world, true, bucket_cap_mb, with_ema);
  Training ddp(rule, world, false, bucket_cap_mb, with_ema);
  const std::vector<float> one_losses = one.train(0, 20), zero_losses = zero.train(0, 20);
  EXPECT_LE(max_relative_difference(zero_losses, one_losses), 1e-5);
  EXPECT_LE(max_relative_difference(flat(zero.net->state_dict()), flat(one.net->state_dict())), 1e-5);
  const std::vector<float> zero_state = saved_state(*zero.optimizer);
  if (world->rank() == 0) {
    EXPECT_LE(max_relative_difference(zero_state, saved_state(*one.optimizer)), 1e-5);
  }
  if (with_ema) {
    EXPECT_LE(max_relative_difference(flat(zero.ema->shadow()), flat(one.ema->shadow())), 1e-5);
  }

  const std::vector<float> ddp_losses = ddp.train(0, 20);
  if (world->size() == 2) {
    EXPECT_EQ(zero_losses, ddp_losses);
    EXPECT_EQ(flat(zero.net->state_dict()), flat(ddp.net->state_dict()));
    if (world->rank() == 0) {
      EXPECT_EQ(zero_state, saved_state(*ddp.optimizer));
    }
    if (with_ema) {
      EXPECT_EQ(flat(zero.ema->shadow()), flat(ddp.ema->shadow()));
    }
  }
  EXPECT_EQ(zero.optimizer->step_count(), ddp.optimizer->step_count());
}

// Whether some bucket's size does not divide by the world size (uneven chunks).
bool has_uneven_bucket(double bucket_cap_mb) {
  dist::DistributedDataParallel ddp(small_cnn(), dist::world(),
                                    {.bucket_cap_mb = bucket_cap_mb, .shard_gradients = true});
  for (const auto& b : ddp.reducer().buckets())
    if (b.numel % dist::world()->size() != 0) return true;
  return false;
}

}  // namespace

TEST(Zero, SgdMomentumWeightDecayMatchesOneProcess) {
  for (double cap : {0.0, 0.001, 25.0}) {
    SCOPED_TRACE("bucket_cap_mb " + std::to_string(cap));
    expect_zero_matches(Rule::sgd, cap, false);
  }
  EXPECT_TRUE(has_uneven_bucket(0.0));
}

TEST(Zero, AdamWWithEmaMatchesOneProcess) {
  for (double cap : {0.0, 25.0}) {
    SCOPED_TRACE("bucket_cap_mb " + std::to_string(cap));
    expect_zero_matches(Rule::adamw, cap, true);
  }
}

TEST(Zero, StateIsShardedOverTheRanks) {
  auto world = dist::world();
  const int n = world->size();
  for (Rule rule : {Rule::sgd, Rule::adamw}) {
    Training one(rule, nullptr, false), zero(rule, world, true, 0.0);
    const int64_t whole = one.optimizer->state_bytes(), mine = zero.optimizer->state_bytes();
    Tensor total = Tensor::from_vector(std::vector<int64_t>{mine}, {1}), most = total.clone();
    world->all_reduce(total)->wait();
    world->all_reduce(most, dist::ReduceOp::max)->wait();
    EXPECT_EQ(total.data<int64_t>()[0], whole);  // every element's state on exactly one rank
    // One bucket per parameter: each rank holds at most one element more per bucket than whole / n.
    const int64_t buckets = static_cast<int64_t>(zero.net->parameters().size());
    const int64_t kinds = static_cast<int64_t>(one.optimizer->state_kinds().size());
    EXPECT_LE(most.data<int64_t>()[0], whole / n + buckets * kinds * 4);
    EXPECT_GT(whole, 0);
  }
}

TEST(Zero, NeedsDdpThatReduceScatters) {
  auto ddp = std::make_shared<dist::DistributedDataParallel>(small_cnn(), dist::world(), dist::DdpOptions{});
  EXPECT_THAT(dpt::testing::error_of([&] {
                dist::ZeroOptimizer(*ddp, groups_of(*ddp), [](std::vector<optim::ParamGroup> gs) {
                  return make_rule(Rule::sgd, std::move(gs));
                });
              }),
              HasSubstr("make it with DdpOptions::shard_gradients"));
}

TEST(Zero, GatherDuringForwardMatchesGatherInStep) {
  auto world = dist::world();
  for (double cap : {0.0, 25.0}) {
    SCOPED_TRACE("bucket_cap_mb " + std::to_string(cap));
    for (bool with_ema : {false, true}) {
      Training in_step(Rule::adamw, world, true, cap, with_ema);
      Training in_forward(Rule::adamw, world, true, cap, with_ema, true);
      EXPECT_EQ(in_forward.train(0, 20), in_step.train(0, 20));
      EXPECT_EQ(flat(in_forward.net->state_dict()), flat(in_step.net->state_dict()));
      if (with_ema) {
        EXPECT_EQ(flat(in_forward.ema->shadow()), flat(in_step.ema->shadow()));
      }
    }
    // Every bucket is left in flight by step(), and each layer's forward waits for its own.
    Training t(Rule::sgd, world, true, cap, false, true);
    auto& zero = dynamic_cast<dist::ZeroOptimizer&>(*t.optimizer);
    const int buckets =
        static_cast<int>(dynamic_cast<dist::DistributedDataParallel&>(*t.model).reducer().buckets().size());
    t.train(0, 1);
    EXPECT_EQ(zero.gathers_pending(), buckets);
    const Data d = rank_batch(1, world->rank(), world->size());
    (*t.model)(d.images);
    EXPECT_EQ(zero.gathers_pending(), 0);
  }
}

// A layer that owns a parameter but does not run Module::before_forward: gathering during
// forward would let it read its parameter in flight, so step() keeps waiting.
class UnhookedScale : public nn::Module {
 public:
  UnhookedScale() { register_parameter("scale", Tensor::full({4}, 1.0f)); }
  Tensor forward(const Tensor& x) override { return x; }
};

TEST(Zero, AModuleWithoutTheHookKeepsTheGatherInStep) {
  auto net = std::make_shared<nn::Sequential>();
  Rng rng(3);
  net->add(std::make_shared<nn::Linear>(4, 4, rng)).add(std::make_shared<UnhookedScale>());
  auto ddp = std::make_shared<dist::DistributedDataParallel>(
      net, dist::world(), dist::DdpOptions{.bucket_cap_mb = 0.0, .shard_gradients = true});
  dist::ZeroOptimizer zero(*ddp, groups_of(*net), [](std::vector<optim::ParamGroup> gs) {
    return make_rule(Rule::sgd, std::move(gs));
  });
  EXPECT_FALSE(zero.gather_during_forward());
  zero.step(kLr);
  EXPECT_EQ(zero.gathers_pending(), 0);
}

namespace {

// Rank 0's fresh directory, known to every rank (removed with it).
class SharedTempDir {
 public:
  SharedTempDir() {
    if (dist::world()->rank() == 0) dir_ = std::make_unique<dpt::testing::TempDir>("dpt_zero");
    std::vector<int64_t> chars(256, 0);
    if (dir_)
      for (size_t i = 0; i < dir_->path().size() && i < chars.size(); ++i) chars[i] = dir_->path()[i];
    Tensor t = Tensor::from_vector(chars, {256});
    dist::world()->broadcast(t, 0)->wait();
    for (int64_t i = 0; i < 256 && t.data<int64_t>()[i] != 0; ++i)
      path_ += static_cast<char>(t.data<int64_t>()[i]);
  }
  ~SharedTempDir() { dist::world()->barrier()->wait(); }  // every rank is done with it
  const std::string& path() const { return path_; }

 private:
  std::unique_ptr<dpt::testing::TempDir> dir_;
  std::string path_;
};

// Saves checkpoint `step` of `t` into `dir`: every rank of t's group calls it (a sharded
// optimizer gathers), its rank 0 (or the one process) writes.
void save(Training& t, const std::string& dir, int step) {
  const auto state = t.optimizer->state_for_save();
  if (!t.group || t.group->rank() == 0) {
    io::CheckpointInfo info;
    info.progress.step = step;
    info.world_size = t.group ? t.group->size() : 1;
    info.batch_size = kBatch / info.world_size;
    io::checkpoint_save(dir, t.objects(), state, info, 0);
  }
}

struct Continuation {
  std::vector<float> losses, weights, ema;
};

Continuation resume_and_train(Training& t, const std::string& json) {
  io::checkpoint_load(json, t.objects());
  Continuation c;
  c.losses = t.train(10, 10);
  c.weights = flat(t.net->state_dict());
  c.ema = flat(t.ema->shadow());
  return c;
}

void expect_close(const Continuation& got, const Continuation& want, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_LE(max_relative_difference(got.losses, want.losses), 1e-5);
  EXPECT_LE(max_relative_difference(got.weights, want.weights), 1e-5);
  EXPECT_LE(max_relative_difference(got.ema, want.ema), 1e-5);
}

}  // namespace

TEST(Zero, ShardedCheckpointResumesUnshardedAndAtAnotherWorldSize) {
  auto world = dist::world();
  const int n = world->size();
  for (Rule rule : {Rule::sgd, Rule::adamw}) {
    SCOPED_TRACE(rule == Rule::sgd ? "sgd" : "adamw");
    SharedTempDir dir;
    const std::string sharded_json = dir.path() + "/sharded/step-10.json";
    const std::string whole_json = dir.path() + "/whole/step-10.json";
    // Uninterrupted: 20 steps sharded over the world, checkpoint 10 on the way.
    Training run(rule, world, true, 0.0, true);
    run.train(0, 10);
    save(run, dir.path() + "/sharded", 10);
    world->barrier()->wait();
    Continuation want;
    want.losses = run.train(10, 10);
    want.weights = flat(run.net->state_dict());
    want.ema = flat(run.ema->shadow());

    // The same world size, sharded again: the same arithmetic, bit for bit.
    Training again(rule, world, true, 0.0, true);
    const Continuation same = resume_and_train(again, sharded_json);
    EXPECT_EQ(same.losses, want.losses);
    EXPECT_EQ(same.weights, want.weights);
    EXPECT_EQ(same.ema, want.ema);

    // One process, unsharded, on the global batch.
    Training one(rule, nullptr, false, 25.0, true);
    expect_close(resume_and_train(one, sharded_json), want, "unsharded, one process");

    // Sharded over world ranks 0..n-2 (np 2: nothing smaller to shard over).
    if (n >= 3) {
      std::vector<int> members;
      for (int r = 0; r < n - 1; ++r) members.push_back(r);
      dist::GroupPtr fewer = dist::new_group(members);
      if (fewer) {
        Training smaller(rule, fewer, true, 0.0, true);
        expect_close(resume_and_train(smaller, sharded_json), want, "sharded over " + std::to_string(n - 1));
      }
    }

    // An unsharded checkpoint (one process, 10 steps) resumed sharded over the world.
    Training first(rule, nullptr, false, 25.0, true);
    first.train(0, 10);
    if (world->rank() == 0) save(first, dir.path() + "/whole", 10);
    world->barrier()->wait();
    Training sharded(rule, world, true, 0.0, true);
    expect_close(resume_and_train(sharded, whole_json), want, "unsharded checkpoint, sharded resume");
  }
}

TEST(Zero, NonfiniteVerdictIsAgreedByEveryRank) {
  auto world = dist::world();
  const int n = world->size(), r = world->rank();
  Training t(Rule::sgd, world, true, 0.0);
  optim::NonfiniteGuard guard(*t.net, *t.optimizer, false, false);
  auto& ddp = dynamic_cast<dist::DistributedDataParallel&>(*t.model);
  // Bucket 0's first element is in rank 0's chunk; the last rank alone makes its gradient NaN.
  const auto& bucket = ddp.reducer().buckets().front();
  const Tensor poisoned = t.net->named_parameters()[bucket.indices.front()].second;
  for (bool poison : {false, true, false}) {
    SCOPED_TRACE(poison ? "NaN in one gradient of the last rank" : "finite");
    const Data d = rank_batch(0, r, n);
    Tensor loss = cross_entropy((*t.model)(d.images), d.labels);
    t.optimizer->zero_grad();
    if (poison && r == n - 1) poisoned.grad().data<float>()[bucket.offsets.front()] = NAN;
    loss.backward();
    bool local = true;  // this rank's own chunk
    for (const Tensor& g : t.optimizer->step_gradients())
      for (float v : g.to_vector()) local = local && std::isfinite(v);
    EXPECT_EQ(local, !poison || r != 0);  // only rank 0 sees it
    EXPECT_EQ(guard.step_finite(loss), !poison);
  }
}
