// Pipeline stages across ranks (parallel/pipeline.h) against one process. At np 2 a
// 2-stage pipeline, at np 3 a 3-stage one, at np 4 a 4-stage one and 2 stages x 2
// data-parallel replicas (DDP per stage over the mesh's dp axis): 20 steps of SGD with
// momentum, GPipe and 1F1B, an mlp and a ResNet, end with the losses and weights of one
// process that runs the same micro-batches one after another with gradient accumulation
// (each rank trains that reference itself), bit for bit. Batch norm normalises each
// micro-batch on its own in both. The reference sums the gradients as the pipeline does
// (per replica, then the replicas' sums, halved): summed in the order of one global batch
// instead, ResNet-14's weights agree to 6e-7 for 16 steps, then jump apart and end 2e-3
// apart: rounding amplified by the network (measured), not another computation. Also: DDP all-reduces once per step, not per micro-batch;
// and impossible setups are errors on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "core/rng.h"
#include "parallel/ddp.h"
#include "comm/dist.h"
#include "parallel/pipeline.h"
#include "error_of.h"
#include "io/config.h"
#include "models/registry.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "optim/sgd.h"

using namespace dpt;
using dpt::testing::error_of;
using ::testing::HasSubstr;

namespace {

constexpr int64_t kBatch = 24;  // the global batch: 2 replicas x 4 micro-batches of 3, or 4 of 6
constexpr int kMicroBatches = 4;
constexpr int kSteps = 20;

struct ModelCase {
  const char* yaml;
  models::ModelSpec spec;
};
const ModelCase kMlp{"{name: mlp, hidden: [32, 24, 16]}", {1, 6, 6, 5, 3}};   // 4 units
const ModelCase kResNet{"{name: resnet_cifar, depth: 14}", {3, 8, 8, 5, 3}};  // 6 units

nn::ModulePtr build(const ModelCase& c) { return models::build_model(YAML::Load(c.yaml), c.spec); }

struct Data {
  Tensor images, labels;
};

// Step k's global batch, the same on every rank.
Data global_batch(const ModelCase& c, int step) {
  Tensor x = Tensor::empty({kBatch, c.spec.in_channels, c.spec.height, c.spec.width});
  Rng(100 + step).fill_normal(x, 0, 1);
  std::vector<int64_t> y(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) y[i] = (i * 7 + step) % c.spec.num_classes;
  return {x, Tensor::from_vector(y, {kBatch})};
}

// Rows [begin, end) of a contiguous batch, as views.
Data rows(const Data& d, int64_t begin, int64_t end) {
  auto slice = [&](const Tensor& t) {
    Shape shape = t.shape();
    int64_t per = t.numel() / shape[0];
    shape[0] = end - begin;
    return t.as_strided(shape, shape_contiguous_strides(shape), t.offset() + begin * per);
  };
  return {slice(d.images), slice(d.labels)};
}

optim::Sgd make_sgd(const nn::Module& model) {
  return optim::Sgd(optim::param_groups(model, 1e-3f, false), {0.9f, false});
}
constexpr float kLr = 0.05f;

struct Trained {
  std::vector<double> losses;  // per step, the global batch's mean
  nn::NamedTensors params, buffers;
};

// One process with the pipeline's arithmetic: each step runs the global batch's dp x M
// micro-batches one after another, replica by replica. Within a replica the gradients of
// the losses scaled by 1 / M accumulate, as on each stage; the replicas' sums are added in
// replica order and scaled by 1 / dp, as DDP's all-reduce (avg) does. The step's loss is
// the mean over replicas of each replica's micro-batch mean. Batch norm normalises each
// micro-batch on its own, here as in the pipeline. For dp <= 2 this is the pipeline's
// arithmetic exactly (a sum of two is the same in either order, 1 / 2 is exact).
Trained train_reference(const ModelCase& c, int dp) {
  auto model = build(c);
  optim::Sgd sgd = make_sgd(*model);
  const int64_t micro = kBatch / (dp * kMicroBatches);
  nn::NamedTensors params = model->named_parameters();
  Trained out;
  for (int k = 0; k < kSteps; ++k) {
    Data d = global_batch(c, k);
    std::vector<Tensor> sum(params.size());
    double loss = 0;
    for (int r = 0; r < dp; ++r) {
      sgd.zero_grad();
      double replica = 0;
      for (int m = 0; m < kMicroBatches; ++m) {
        const int64_t begin = (r * kMicroBatches + m) * micro;
        Data part = rows(d, begin, begin + micro);
        Tensor l = cross_entropy((*model)(part.images), part.labels);
        replica += l.item();
        mul(l, 1.0f / kMicroBatches).backward();
      }
      loss += replica / kMicroBatches;
      for (size_t i = 0; i < params.size(); ++i) {
        const Tensor& g = params[i].second.grad();
        sum[i] = r == 0 ? g.clone() : add(sum[i], g);
      }
    }
    for (size_t i = 0; i < params.size(); ++i) params[i].second.set_grad(mul(sum[i], 1.0f / dp));
    out.losses.push_back(loss / dp);
    sgd.step(kLr);
  }
  out.params = model->named_parameters();
  out.buffers = model->named_buffers();
  return out;
}

// The mean of each replica's `loss`, in double, summed in replica order (the reference's).
double replicas_mean(double loss, dist::ProcessGroup& dp) {
  int64_t bits = 0;
  std::memcpy(&bits, &loss, sizeof bits);
  Tensor all = Tensor::empty({dp.size()}, DType::i64);
  dp.all_gather(all, Tensor::from_vector(std::vector<int64_t>{bits}, {1}))->wait();
  double sum = 0;
  for (int r = 0; r < dp.size(); ++r) {
    double replica = 0;
    std::memcpy(&replica, all.data<int64_t>() + r, sizeof replica);
    sum += replica;
  }
  return sum / dp.size();
}

// This rank's stage of a dp x pp mesh (world rank = d * pp + s), with DDP over dp when dp > 1.
Trained train_pipeline(const ModelCase& c, int dp, int pp, dist::PipelineSchedule schedule,
                       dist::DdpOptions ddp_options = {.bucket_cap_mb = 0.002}) {
  dist::DeviceMesh mesh({dp, pp}, {"dp", "pp"});
  const int d = mesh.coordinates()[0], s = mesh.coordinates()[1];
  auto model = build(c);
  nn::ModulePtr stage = nn::split_stage(*model, pp, s);
  model.reset();  // the stage keeps only its own units
  std::shared_ptr<dist::DistributedDataParallel> ddp;
  if (dp > 1)
    stage = ddp = std::make_shared<dist::DistributedDataParallel>(stage, mesh.group("dp"), ddp_options);
  dist::Pipeline pipeline(stage, mesh.group("pp"),
                          [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); },
                          {.micro_batches = kMicroBatches, .schedule = schedule});
  optim::Sgd sgd = make_sgd(*stage);
  const int64_t per_replica = kBatch / dp;
  Trained out;
  for (int k = 0; k < kSteps; ++k) {
    sgd.zero_grad();
    Data mine = rows(global_batch(c, k), d * per_replica, (d + 1) * per_replica);
    dist::PipelineStepStats stats = pipeline.train_step(mine.images, mine.labels);
    EXPECT_NEAR(stats.idle_ms, stats.step_ms - stats.compute_ms, 1e-9);
    EXPECT_EQ(stats.max_in_flight, dist::pipeline_max_in_flight(schedule, pp, s, kMicroBatches));
    out.losses.push_back(replicas_mean(stats.loss, *mesh.group("dp")));
    sgd.step(kLr);
  }
  nn::Module& own = ddp ? ddp->module() : *stage;
  out.params = own.named_parameters();
  out.buffers = own.named_buffers();
  return out;
}

// max |a - b| / max |b| over the tensors of `mine`, each against the reference's of its name.
double relative_difference(const nn::NamedTensors& mine, const nn::NamedTensors& reference) {
  std::map<std::string, Tensor> by_name(reference.begin(), reference.end());
  double diff = 0, scale = 0;
  for (const auto& [name, t] : mine) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      ADD_FAILURE() << "'" << name << "' is not a parameter of the whole model";
      return INFINITY;
    }
    std::vector<float> a = t.to_vector(), b = it->second.to_vector();
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
      scale = std::max(scale, static_cast<double>(std::abs(b[i])));
    }
  }
  return diff == 0 ? 0 : diff / scale;  // 0 also when `mine` is empty (a stage without buffers)
}

struct Layout {
  int dp, pp;
};

// The meshes each world size runs.
std::vector<Layout> layouts(int world) {
  switch (world) {
    case 2:
      return {{1, 2}};
    case 3:
      return {{1, 3}};
    case 4:
      return {{2, 2}, {1, 4}};
    default:
      return {};
  }
}

void expect_equal_to_one_process(const ModelCase& c) {
  const int world = dist::world()->size();
  if (layouts(world).empty()) GTEST_SKIP() << "runs at np 2, 3 and 4, not " << world;
  for (Layout layout : layouts(world)) {
    const Trained reference = train_reference(c, layout.dp);
    for (auto schedule : {dist::PipelineSchedule::gpipe, dist::PipelineSchedule::one_f_one_b}) {
      SCOPED_TRACE("dp " + std::to_string(layout.dp) + " x pp " + std::to_string(layout.pp) + ", " +
                   io::name_of(schedule));
      const Trained mine = train_pipeline(c, layout.dp, layout.pp, schedule);
      ASSERT_EQ(mine.losses.size(), reference.losses.size());
      EXPECT_LT(reference.losses.back(), reference.losses.front());  // it trained
      // The reference's arithmetic (dp <= 2): the same bits.
      EXPECT_EQ(mine.losses, reference.losses);
      EXPECT_EQ(relative_difference(mine.params, reference.params), 0.0);
      // The running statistics too, without DDP; with it each forward starts from replica
      // 0's (broadcast_buffers), which saw only its own micro-batches.
      if (layout.dp == 1) {
        EXPECT_EQ(relative_difference(mine.buffers, reference.buffers), 0.0);
      }
    }
  }
}

// A group that counts all_reduce calls, records the data messages of each batch_send_recv
// (not the i64 headers: on GPUs those are CPU tensors, sent by MPI, which never blocks a
// stream) and forwards everything to the group it wraps.
class CountingGroup : public dist::ProcessGroup {
 public:
  explicit CountingGroup(dist::GroupPtr inner)
      : ProcessGroup(inner->rank(), inner->world_ranks(), inner->name()), inner_(std::move(inner)) {}
  dist::WorkPtr all_reduce(const Tensor& t, dist::ReduceOp op) override {
    ++all_reduces;
    return inner_->all_reduce(t, op);
  }
  dist::WorkPtr broadcast(const Tensor& t, int root) override { return inner_->broadcast(t, root); }
  dist::WorkPtr all_gather(const Tensor& out, const Tensor& in) override {
    return inner_->all_gather(out, in);
  }
  dist::WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, dist::ReduceOp op) override {
    return inner_->reduce_scatter(out, in, op);
  }
  dist::WorkPtr reduce(const Tensor& t, int root, dist::ReduceOp op) override {
    return inner_->reduce(t, root, op);
  }
  dist::WorkPtr gather(const Tensor& out, const Tensor& in, int root) override {
    return inner_->gather(out, in, root);
  }
  dist::WorkPtr scatter(const Tensor& out, const Tensor& in, int root) override {
    return inner_->scatter(out, in, root);
  }
  dist::WorkPtr all_to_all(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_splits,
                           const std::vector<int64_t>& in_splits) override {
    return inner_->all_to_all(out, in, out_splits, in_splits);
  }
  dist::WorkPtr barrier() override { return inner_->barrier(); }
  dist::WorkPtr send(const Tensor& t, int dst, int tag) override { return inner_->send(t, dst, tag); }
  dist::WorkPtr recv(const Tensor& t, int src, int tag) override { return inner_->recv(t, src, tag); }
  Tensor collective_buffer(int64_t numel, DType dtype, Device device) override {
    return inner_->collective_buffer(numel, dtype, device);
  }
  std::vector<dist::WorkPtr> batch_send_recv(const std::vector<dist::P2POp>& ops) override {
    std::vector<int64_t> batch;
    for (const dist::P2POp& op : ops)
      if (op.tensor.dtype() != DType::i64) batch.push_back(op.send ? 1000 + op.peer : op.peer);
    if (!batch.empty()) batches.push_back(batch);
    return inner_->batch_send_recv(ops);
  }
  int all_reduces = 0;
  std::vector<std::vector<int64_t>> batches;  // per batch: 1000 + peer for a send, peer for a receive

 private:
  dist::GroupPtr inner_;
};

// Whether every rank gets through its batches of messages (CountingGroup::batches) when each
// rank runs its batches one after another on one stream, as NCCL does with no message
// buffered (messages above its buffer sizes): a batch completes once each of its messages
// has met its match (the k-th send from r to p meets the k-th receive at p from r) in the
// peer's current batch or an earlier one.
bool batches_complete(const std::vector<std::vector<std::vector<int64_t>>>& ranks) {
  const int n = static_cast<int>(ranks.size());
  // Where each message's match lies: the peer's batch index.
  std::map<std::tuple<int, int, bool>, std::vector<size_t>> posted;  // (from, to, send) -> batch per message
  for (int r = 0; r < n; ++r)
    for (size_t b = 0; b < ranks[r].size(); ++b)
      for (int64_t m : ranks[r][b]) {
        const bool send = m >= 1000;
        const int peer = static_cast<int>(send ? m - 1000 : m);
        posted[send ? std::make_tuple(r, peer, true) : std::make_tuple(peer, r, false)].push_back(b);
      }
  std::vector<size_t> current(n, 0);
  auto ready = [&](int r) {
    std::map<std::pair<int, bool>, size_t> seen;  // messages of this rank before, per (peer, send)
    for (size_t b = 0; b < current[r]; ++b)
      for (int64_t m : ranks[r][b]) ++seen[{static_cast<int>(m % 1000), m >= 1000}];
    for (int64_t m : ranks[r][current[r]]) {
      const bool send = m >= 1000;
      const int peer = static_cast<int>(m % 1000);
      const size_t k = seen[{peer, send}]++;
      const auto& match = posted[send ? std::make_tuple(r, peer, false) : std::make_tuple(peer, r, true)];
      if (k >= match.size() || match[k] > current[peer]) return false;
    }
    return true;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r)
      if (current[r] < ranks[r].size() && ready(r)) {
        ++current[r];
        progress = true;
      }
  }
  for (int r = 0; r < n; ++r)
    if (current[r] < ranks[r].size()) return false;
  return true;
}

// Every rank's batches, gathered over the world.
std::vector<std::vector<std::vector<int64_t>>> gather_batches(const std::vector<std::vector<int64_t>>& mine) {
  std::vector<int64_t> flat;
  for (const auto& b : mine) {
    flat.push_back(static_cast<int64_t>(b.size()));
    flat.insert(flat.end(), b.begin(), b.end());
  }
  dist::ProcessGroup& world = *dist::world();
  Tensor lengths = Tensor::empty({world.size()}, DType::i64);
  world.all_gather(lengths, Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(flat.size())}, {1}))->wait();
  int64_t longest = 0;
  for (int r = 0; r < world.size(); ++r) longest = std::max(longest, lengths.data<int64_t>()[r]);
  flat.resize(static_cast<size_t>(longest), 0);
  Tensor all = Tensor::empty({longest * world.size()}, DType::i64);
  world.all_gather(all, Tensor::from_vector(flat, {longest}))->wait();
  std::vector<std::vector<std::vector<int64_t>>> ranks(world.size());
  for (int r = 0; r < world.size(); ++r) {
    const int64_t* p = all.data<int64_t>() + r * longest;
    for (int64_t i = 0; i < lengths.data<int64_t>()[r]; i += 1 + p[i])
      ranks[r].push_back(std::vector<int64_t>(p + i + 1, p + i + 1 + p[i]));
  }
  return ranks;
}

}  // namespace

TEST(Pipeline, NoStageWaitsOnAStageThatWaitsOnIt) {
  // The grouping that keeps 1F1B from deadlocking on NCCL, checked on the messages a real
  // step sends: run one step per schedule, gather every stage's batches and play them as
  // NCCL would. The same messages one to a batch (how they went before they were grouped)
  // must deadlock under 1F1B, or this check could not tell.
  const int S = dist::world()->size();
  if (S < 2) GTEST_SKIP() << "needs np >= 2 (a pipeline of 2 or more stages)";
  if (S > 4) GTEST_SKIP() << "the mlp has 4 units: at most 4 stages";
  for (auto schedule : {dist::PipelineSchedule::gpipe, dist::PipelineSchedule::one_f_one_b}) {
    SCOPED_TRACE(io::name_of(schedule));
    auto model = build(kMlp);
    auto counting = std::make_shared<CountingGroup>(dist::world());
    dist::Pipeline pipeline(nn::split_stage(*model, S, dist::world()->rank()), counting,
                            [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); },
                            {.micro_batches = kMicroBatches, .schedule = schedule});
    Data d = global_batch(kMlp, 0);
    pipeline.train_step(d.images, d.labels);
    const auto ranks = gather_batches(counting->batches);
    EXPECT_TRUE(batches_complete(ranks));
    std::vector<std::vector<std::vector<int64_t>>> one_by_one(ranks.size());
    for (size_t r = 0; r < ranks.size(); ++r)
      for (const auto& b : ranks[r])
        for (int64_t m : b) one_by_one[r].push_back({m});
    if (schedule == dist::PipelineSchedule::one_f_one_b)
      EXPECT_FALSE(batches_complete(one_by_one)) << "the ungrouped messages should deadlock under 1F1B";
    else
      EXPECT_TRUE(batches_complete(one_by_one));  // GPipe's order never crosses
  }
}

TEST(Pipeline, MlpEqualsOneProcess) { expect_equal_to_one_process(kMlp); }

TEST(Pipeline, ResNetEqualsOneProcess) { expect_equal_to_one_process(kResNet); }

TEST(Pipeline, DdpAllReducesOncePerStepAfterTheLastMicroBatch) {
  if (dist::world()->size() != 4) GTEST_SKIP() << "needs np 4 (2 stages x 2 replicas)";
  dist::DeviceMesh mesh({2, 2}, {"dp", "pp"});
  const int d = mesh.coordinates()[0], s = mesh.coordinates()[1];
  auto model = build(kMlp);
  auto counting = std::make_shared<CountingGroup>(mesh.group("dp"));
  // One bucket per parameter: every stage has several, so "once per micro-batch" would show.
  auto ddp = std::make_shared<dist::DistributedDataParallel>(nn::split_stage(*model, 2, s), counting,
                                                             dist::DdpOptions{.bucket_cap_mb = 0});
  dist::Pipeline pipeline(ddp, mesh.group("pp"),
                          [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); },
                          {.micro_batches = kMicroBatches, .schedule = dist::PipelineSchedule::one_f_one_b});
  for (int k = 0; k < 3; ++k) {
    const size_t buckets = ddp->reducer().buckets().size();
    EXPECT_GE(buckets, 2u);
    const int before = counting->all_reduces;
    Data mine = rows(global_batch(kMlp, k), d * kBatch / 2, (d + 1) * kBatch / 2);
    pipeline.train_step(mine.images, mine.labels);
    // One all-reduce per bucket, launched during the last backward: the reducer's clock
    // starts when the pipeline synchronises that backward.
    EXPECT_EQ(counting->all_reduces - before, static_cast<int>(buckets)) << "step " << k;
    EXPECT_EQ(ddp->reducer().launch_times_ms().size(), buckets);
  }
}

TEST(Pipeline, ImpossibleSetupsAreErrorsOnEveryRank) {
  auto world = dist::world();
  const int n = world->size(), r = world->rank();
  auto loss = [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); };
  auto model = build(kMlp);
  // More stages than units: the same error everywhere, before any message.
  auto tiny = models::build_model(YAML::Load("{name: mlp, hidden: [8]}"), kMlp.spec);
  EXPECT_THAT(error_of([&] { nn::split_stage(*tiny, n + 1, r); }),
              HasSubstr("it has 2 units (0-2, 3), so at most 2 stages"));
  // A micro-batch count that does not divide the batch: every stage refuses the step.
  if (n <= 4) {
    dist::Pipeline pipeline(nn::split_stage(*model, n, r), world, loss, {.micro_batches = 5});
    Data d = global_batch(kMlp, 0);
    EXPECT_THAT(error_of([&] { pipeline.train_step(d.images, d.labels); }),
                HasSubstr("5 micro-batches do not divide the batch of 24 samples"));
    // The pipeline is usable afterwards: nothing was sent.
    dist::Pipeline good(nn::split_stage(*model, n, r), world, loss, {.micro_batches = 4});
    EXPECT_TRUE(std::isfinite(good.train_step(d.images, d.labels).loss));
  }
  // A stage that is not the group rank's.
  EXPECT_THAT(error_of([&] { dist::Pipeline(nn::split_stage(*model, n, (r + 1) % n), world, loss, {}); }),
              HasSubstr("holds stage " + std::to_string((r + 1) % n) + " of " + std::to_string(n)));
}
