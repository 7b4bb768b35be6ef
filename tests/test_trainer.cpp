// The Trainer (framework/train/trainer.h) driven in-process on one rank, against the same
// run written as a plain loop over the library's pieces — data, model, loss, optimizer,
// schedule, EMA — with none of the Trainer's wiring (no sharding, run control, step object,
// batch source or metrics code). The weights after the run must agree bit for bit, and the
// metrics.jsonl the Trainer wrote must hold the loop's mean training loss per epoch and an
// evaluation counted by hand (argmax of each row, cross-entropy in double). Resuming from a
// checkpoint must land on the same weights. Training through the binary, on several ranks
// and with faults: test_train_cli.cpp, test_train_checkpoint.cpp, test_faults.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "datasets/augment.h"
#include "datasets/loader.h"
#include "datasets/synthetic.h"
#include "comm/dist.h"
#include "io/atomic_file.h"
#include "io/config.h"
#include "io/json.h"
#include "models/registry.h"
#include "ops/loss.h"
#include "optim/adamw.h"
#include "optim/ema.h"
#include "optim/schedule.h"
#include "optim/sgd.h"
#include "temp_dir.h"
#include "train/batch_source.h"
#include "train/parallel_plan.h"
#include "train/trainer.h"

using namespace dpt;

namespace {

// What an evaluation pass gives, counted by hand from the logits.
struct HandEval {
  double loss = 0, accuracy = 0;
};

// Every sample of `test` through `net` in eval mode, `batch` at a time: the mean
// cross-entropy (log-sum-exp in double) and the fraction of rows whose first largest logit
// is the label.
HandEval evaluate_by_hand(nn::Module& net, const data::Dataset& test, int64_t batch) {
  autograd::NoGrad no_grad;
  net.eval();
  data::Loader loader(test, {.batch_size = batch, .shuffle = false, .drop_last = false});
  loader.start_epoch(0);
  data::Batch b;
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  while (loader.next(b)) {
    const std::vector<float> logits = net(b.images).to_vector();
    const int64_t* labels = b.labels.data<int64_t>();
    const int64_t rows = b.labels.numel(), classes = static_cast<int64_t>(logits.size()) / rows;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = logits.data() + r * classes;
      const int64_t label = labels[r];
      int64_t best = 0;
      for (int64_t k = 1; k < classes; ++k)
        if (row[k] > row[best]) best = k;
      correct += best == label;
      double max = row[best], sum = 0;
      for (int64_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(row[k]) - max);
      loss_sum += max + std::log(sum) - row[label];
    }
    seen += rows;
  }
  net.train();
  return {loss_sum / static_cast<double>(seen), static_cast<double>(correct) / static_cast<double>(seen)};
}

// What the plain loop leaves: the model and, per epoch, the mean training loss over its
// steps and the hand-counted evaluation (with the EMA's weights when there is one).
struct PlainRun {
  nn::ModulePtr net;
  std::vector<double> train_loss;
  std::vector<HandEval> eval;
};

// The run `c` describes (synthetic data, one process, SGD or AdamW, any schedule, EMA and
// augmentation optional), written as a loop.
PlainRun plain_run(const io::Config& c) {
  const io::DatasetConfig& d = c.dataset;
  const data::Dataset train =
      data::make_synthetic(d.shape[0], d.shape[1], d.shape[2], d.classes, d.size, c.seed);
  const data::Dataset test = data::make_synthetic(d.shape[0], d.shape[1], d.shape[2], d.classes,
                                                  std::max<int64_t>(d.size / 6, 1), c.seed + 1);
  PlainRun run;
  run.net = models::build_model(c.model.node, {d.shape[0], d.shape[1], d.shape[2], d.classes, c.seed});
  nn::Module& net = *run.net;

  const io::OptimizerConfig& o = c.optimizer;
  auto groups = optim::param_groups(net, static_cast<float>(o.weight_decay), o.no_decay_bias_bn);
  std::unique_ptr<optim::Optimizer> optimizer;
  if (o.name == io::OptimizerName::sgd)
    optimizer =
        std::make_unique<optim::Sgd>(groups, optim::SgdOptions{static_cast<float>(o.momentum), o.nesterov});
  else
    optimizer = std::make_unique<optim::AdamW>(
        groups, optim::AdamWOptions{static_cast<float>(o.betas[0]), static_cast<float>(o.betas[1]),
                                    static_cast<float>(o.eps)});
  std::unique_ptr<optim::Ema> ema;
  if (c.ema_decay > 0) ema = std::make_unique<optim::Ema>(net, static_cast<float>(c.ema_decay));

  int64_t steps = train.size() / c.batch_size;
  if (c.max_steps_per_epoch > 0) steps = std::min(steps, c.max_steps_per_epoch);
  const optim::LrSchedule schedule(static_cast<float>(o.lr), c.schedule, steps, c.epochs);

  data::LoaderOptions loader_options{
      .batch_size = c.batch_size, .shuffle = true, .drop_last = true, .seed = c.seed};
  if (d.augment) loader_options.transform = data::make_augment_transform({}, train.normalization, c.seed, 0);
  data::Loader loader(train, std::move(loader_options));
  for (int64_t epoch = 0; epoch < c.epochs; ++epoch) {
    loader.start_epoch(epoch);
    double loss_sum = 0;
    for (int64_t s = 0; s < steps; ++s) {
      data::Batch batch;
      EXPECT_TRUE(loader.next(batch));
      optimizer->zero_grad();
      Tensor loss = cross_entropy(net(batch.images), batch.labels, static_cast<float>(c.label_smoothing));
      loss.backward();
      optimizer->step(schedule.lr_at(epoch * steps + s));
      if (ema) ema->update(net);
      loss_sum += loss.item();
    }
    run.train_loss.push_back(loss_sum / static_cast<double>(steps));
    std::unique_ptr<optim::Ema::Swap> averaged;
    if (ema) averaged = std::make_unique<optim::Ema::Swap>(*ema, net);
    run.eval.push_back(evaluate_by_hand(net, test, c.eval_batch_size));
  }
  return run;
}

// metrics.jsonl's lines, parsed.
std::vector<io::JsonIn> metrics_lines(const std::string& dir) {
  std::vector<io::JsonIn> lines;
  std::ifstream in(dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) lines.push_back(io::json_parse(line, "metrics.jsonl"));
  return lines;
}

// Every tensor of the two state dicts (parameters and buffers) equal bit for bit.
void expect_same_bits(nn::Module& trained, nn::Module& reference) {
  const nn::NamedTensors got = trained.state_dict(), want = reference.state_dict();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first);
    const std::vector<float> a = got[i].second.to_vector(), b = want[i].second.to_vector();
    ASSERT_EQ(a.size(), b.size()) << got[i].first;
    int64_t differ = 0;
    for (size_t k = 0; k < a.size(); ++k) differ += std::memcmp(&a[k], &b[k], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0) << got[i].first << ": " << differ << " of " << a.size() << " values differ";
  }
}

// The Trainer's epochs against the loop's: the training loss (metrics.jsonl keeps 9
// significant digits), and the evaluation (accuracy exact up to its f32 division).
void expect_same_epochs(const std::vector<io::JsonIn>& lines, const PlainRun& want) {
  ASSERT_EQ(lines.size(), want.train_loss.size());
  for (size_t e = 0; e < lines.size(); ++e) {
    SCOPED_TRACE("epoch " + std::to_string(e + 1));
    EXPECT_EQ(lines[e].at("epoch").get<int64_t>(), static_cast<int64_t>(e + 1));
    EXPECT_NEAR(lines[e].at("train_loss").get<double>(), want.train_loss[e], 1e-8 * want.train_loss[e]);
    EXPECT_NEAR(lines[e].at("test_acc").get<double>(), want.eval[e].accuracy, 1e-6);
    EXPECT_NEAR(lines[e].at("test_loss").get<double>(), want.eval[e].loss, 1e-5 * want.eval[e].loss);
  }
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override { dist::init(); }

  io::Config config(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
    const std::string path = dir_.file("config.yaml");
    std::ofstream(path) << yaml << "output: {dir: " << dir_.file("run") << "}\n";
    return io::load_config(path, overrides);
  }

  dpt::testing::TempDir dir_{"dpt_trainer"};
};

// A small ResNet (convolutions, batch norm, residuals) on 3x8x8 synthetic images with
// augmentation, SGD with Nesterov momentum and weight decay, a warm-up into a cosine
// schedule, label smoothing and an EMA that evaluation uses. 80 samples in batches of 16
// is 5 steps an epoch, cut to 4; the 13 test samples end in a partial batch of 5.
const char* kResnetRun =
    "model: {name: resnet_cifar, depth: 8}\n"
    "dataset: {name: synthetic, shape: [3, 8, 8], classes: 4, size: 80, augment: true}\n"
    "epochs: 3\nbatch_size: 16\neval_batch_size: 8\nmax_steps_per_epoch: 4\n"
    "threads: 1\ndevice: cpu\nseed: 7\nlabel_smoothing: 0.1\nema_decay: 0.8\n"
    "optimizer: {name: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 5.0e-4}\n"
    "schedule: {name: cosine, warmup_epochs: 1, min_lr: 0.001}\n"
    "checkpoint: {every_epochs: 1, keep_last: 0}\n";

TEST_F(TrainerTest, SgdRunMatchesAPlainLoopBitForBit) {
  const io::Config c = config(kResnetRun);
  train::Trainer trainer(c);
  ASSERT_EQ(trainer.run(), 0);
  const PlainRun want = plain_run(c);
  expect_same_bits(trainer.model(), *want.net);
  expect_same_epochs(metrics_lines(c.output.dir), want);
}

// AdamW (decoupled weight decay, bias correction), dropout (its random mask must be drawn
// in the same order) and a multistep schedule, without EMA or augmentation.
TEST_F(TrainerTest, AdamWRunWithDropoutMatchesAPlainLoopBitForBit) {
  const io::Config c = config(
      "model: {name: mnist_cnn, dropout: 0.5}\n"
      "dataset: {name: synthetic, shape: [1, 8, 8], classes: 3, size: 48, augment: false}\n"
      "epochs: 3\nbatch_size: 12\neval_batch_size: 5\nthreads: 1\ndevice: cpu\nseed: 3\n"
      "optimizer: {name: adamw, lr: 0.002, weight_decay: 0.05, no_decay_bias_bn: false}\n"
      "schedule: {name: multistep, milestones: [1, 2], gamma: 0.5}\n");
  train::Trainer trainer(c);
  ASSERT_EQ(trainer.run(), 0);
  const PlainRun want = plain_run(c);
  expect_same_bits(trainer.model(), *want.net);
  expect_same_epochs(metrics_lines(c.output.dir), want);
}

// A second Trainer resumed from the first's checkpoint after epoch 1 (model, momentum, EMA,
// schedule position, data order) trains epochs 2 and 3 to the plain loop's weights, and
// metrics.jsonl keeps epoch 1's line from the first run.
TEST_F(TrainerTest, ResumedFromAnEpochCheckpointMatchesThePlainLoop) {
  const io::Config c = config(kResnetRun);
  ASSERT_EQ(train::Trainer(c).run(), 0);
  const std::string after_epoch_1 = c.output.dir + "/checkpoints/step-4.json";
  ASSERT_TRUE(std::filesystem::exists(after_epoch_1));
  train::TrainerOptions options;
  options.resume = after_epoch_1;
  train::Trainer resumed(c, options);
  ASSERT_EQ(resumed.run(), 0);
  const PlainRun want = plain_run(c);
  expect_same_bits(resumed.model(), *want.net);
  expect_same_epochs(metrics_lines(c.output.dir), want);
}

TEST_F(TrainerTest, ABatchLargerThanTheTrainingSetIsAnError) {
  const io::Config c = config(kResnetRun, {"batch_size=96"});
  try {
    train::Trainer trainer(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "batch_size 96 is larger than the training set (80 samples)");
  }
}

// distributed.backend states how the gradients travel; on the CPU, NCCL cannot carry them.
TEST_F(TrainerTest, NcclOnTheCpuIsAnError) {
  const io::Config c = config(kResnetRun, {"distributed.backend=nccl"});
  try {
    train::Trainer trainer(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "distributed.backend: nccl carries CUDA tensors, but this run trains on cpu: set device: cuda, or "
                 "distributed.backend: auto or mpi");
  }
  EXPECT_NO_THROW(train::Trainer(config(kResnetRun, {"distributed.backend=mpi", "epochs=1"})));
}

// A parallel plan refuses, naming the key, an option it cannot honour, before any rank
// trains without it: the pipeline's first refusal in its list, none once all are off; the
// data-parallel plan honours them.
TEST_F(TrainerTest, APipelinePlanRefusesWhatItCannotHonourByKey) {
  train::ParallelLayout pipeline;
  pipeline.pp = 2;
  auto refusal = [&](const std::vector<std::string>& overrides,
                     const train::ParallelLayout& layout) -> std::string {
    const io::Config c = config(kResnetRun, overrides);
    try {
      train::make_plan(c, layout);
    } catch (const Error& e) {
      // One line naming the config file first, as the loader's own errors do.
      const std::string m = e.what(), file = c.source + ": ";
      EXPECT_EQ(m.substr(0, file.size()), file) << m;
      return m.substr(std::min(file.size(), m.size()));
    }
    return "";
  };
  EXPECT_EQ(refusal({"parallel.pp=2"}, pipeline),
            "key 'checkpoint.every_epochs': parallel.pp: 2 trains without checkpoints (each stage's optimizer "
            "state lives on its own rank): set checkpoint.every_epochs: 0");
  EXPECT_EQ(refusal({"parallel.pp=2", "checkpoint.every_epochs=0", "ema_decay=0", "distributed.compress=bf16"},
                    pipeline),
            "key 'distributed.compress': parallel.pp: 2 all-reduces each stage's gradients in f32: set "
            "distributed.compress: none");
  EXPECT_EQ(refusal({"parallel.pp=2", "checkpoint.every_epochs=0", "ema_decay=0"}, pipeline), "");
  EXPECT_EQ(refusal({"distributed.compress=bf16"}, train::ParallelLayout{}), "");
}

// evaluate() alone, on a model nobody trained: a test set of 37 samples in batches of 8
// (the last one partial), against the hand count; the model is back in training mode.
TEST_F(TrainerTest, EvaluateMatchesAHandCount) {
  const data::Dataset test = data::make_synthetic(1, 6, 6, 5, 37, 11);
  nn::ModulePtr net = models::build_model(YAML::Load("{name: mlp, hidden: [16]}"), {1, 6, 6, 5, 2});
  train::BatchSource source(test, {.batch_size = 8, .shuffle = false, .drop_last = false}, Device::cpu());
  const train::EvalResult got = train::evaluate(*net, source);
  EXPECT_TRUE(net->is_training());
  const HandEval want = evaluate_by_hand(*net, test, 8);
  EXPECT_NEAR(got.accuracy, want.accuracy, 1e-7);
  EXPECT_GT(want.accuracy, 0.0);  // something to count: random weights get some right
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss);
}

}  // namespace
