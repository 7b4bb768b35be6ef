// Checkpoints in process: saving and loading restores everything training depends on
// (parameters, buffers, optimizer state and step count, EMA, dropout generators), shown
// by training a restored copy on and comparing it bit for bit with the original; old
// checkpoints are pruned; bad checkpoints are one clear error each. Also the pieces the
// training loop uses around them: resuming the sampler, the non-finite guard and the
// config keys.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "datasets/sampler.h"
#include "error_of.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "models/registry.h"
#include "nn/layers.h"
#include "ops/loss.h"
#include "ops/reduce.h"
#include "optim/adamw.h"
#include "optim/nonfinite.h"
#include "optim/sgd.h"
#include "temp_dir.h"

using namespace dpt;
using dpt::io::read_file;
using dpt::testing::error_of;
using dpt::testing::TempDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

// A model with every kind of state: parameters, dropout (a generator), and an optimizer
// with per-parameter tensors; built from a seed so two copies can start apart.
struct Trainer {
  nn::ModulePtr model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::Ema> ema;
  std::string optimizer_name;

  Trainer(const std::string& optimizer_name, uint64_t seed) : optimizer_name(optimizer_name) {
    model = models::build_model(YAML::Load("{name: mlp, hidden: [16], dropout: 0.3}"), {1, 4, 4, 3, seed});
    auto groups = optim::param_groups(*model, 0.01f, true);
    if (optimizer_name == "adamw")
      optimizer = std::make_unique<optim::AdamW>(groups, optim::AdamWOptions{});
    else
      optimizer = std::make_unique<optim::Sgd>(groups, optim::SgdOptions{0.9f, true});
    ema = std::make_unique<optim::Ema>(*model, 0.9f);
  }
  io::TrainingObjects objects() { return {*model, "mlp", *optimizer, optimizer_name, ema.get()}; }

  void train(int steps, int first) {
    for (int s = first; s < first + steps; ++s) {
      Rng data(1000 + s);
      Tensor x = Tensor::empty({8, 1, 4, 4});
      data.fill_normal(x, 0, 1);
      std::vector<int64_t> y(8);
      for (auto& v : y) v = static_cast<int64_t>(data.next_u64() % 3);
      Tensor loss = cross_entropy((*model)(x), Tensor::from_vector(y, {8}));
      optimizer->zero_grad();
      loss.backward();
      optimizer->step(0.05f);
      ema->update(*model);
    }
  }
};

std::vector<float> flat(const nn::NamedTensors& state) {
  std::vector<float> out;
  for (const auto& [name, t] : state) {
    auto v = t.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

io::CheckpointInfo info_at(int64_t step) {
  io::CheckpointInfo info;
  info.progress.step = step;
  info.progress.epoch = 1;
  info.progress.step_in_epoch = 2;
  info.progress.samples_in_epoch = 2 * 8;
  info.progress.best_test_acc = 0.25;
  info.batch_size = 8;
  info.threads = 1;
  info.config_yaml = "model: {name: mlp}\n";
  return info;
}

// checkpoint_save with the state of an optimizer that is not sharded.
std::string save(const std::string& dir, const io::TrainingObjects& objects, const io::CheckpointInfo& info,
                 int64_t keep_last) {
  return io::checkpoint_save(dir, objects, objects.optimizer.state_for_save(), info, keep_last);
}

void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

}  // namespace

TEST(Checkpoint, RestoredCopyTrainsOnBitForBit) {
  for (const char* optimizer : {"sgd", "adamw"}) {
    TempDir dir("dpt_checkpoint");
    Trainer a(optimizer, 1);
    a.train(3, 0);
    const std::string json = save(dir.path(), a.objects(), info_at(3), 0);
    EXPECT_EQ(json, dir.file("step-3.json"));

    Trainer b(optimizer, 2);  // another initialisation, fresh optimizer state and generators
    ASSERT_NE(flat(a.model->state_dict()), flat(b.model->state_dict()));
    io::CheckpointRecord record = io::checkpoint_load(json, b.objects());
    const io::CheckpointInfo& info = record.info;
    EXPECT_EQ(info.progress.step, 3);
    EXPECT_EQ(info.progress.samples_in_epoch, 16);
    EXPECT_EQ(info.progress.best_test_acc, 0.25);
    EXPECT_EQ(info.config_yaml, "model: {name: mlp}\n");
    EXPECT_TRUE(record.has_ema);
    EXPECT_EQ(flat(a.model->state_dict()), flat(b.model->state_dict()));
    EXPECT_EQ(b.optimizer->step_count(), a.optimizer->step_count());

    // Dropout masks, momentum or Adam moments, AdamW's step count and the EMA all shape
    // the next steps: any one not restored would make these differ.
    a.train(3, 3);
    b.train(3, 3);
    EXPECT_EQ(flat(a.model->state_dict()), flat(b.model->state_dict())) << optimizer;
    EXPECT_EQ(flat(a.ema->shadow()), flat(b.ema->shadow())) << optimizer;
  }
}

TEST(Checkpoint, ModelFileHoldsOnlyTheModelUnderItsOwnNames) {
  TempDir dir("dpt_checkpoint");
  Trainer a("sgd", 1);
  a.train(1, 0);
  save(dir.path(), a.objects(), info_at(1), 0);
  io::SafetensorsFile model = io::safetensors_read(dir.file("step-1.safetensors"));
  std::vector<std::string> names;
  for (const auto& e : model.view.tensors) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"1.weight", "1.bias", "4.weight", "4.bias"}));
  io::SafetensorsFile state = io::safetensors_read(dir.file("step-1.optimizer.safetensors"));
  EXPECT_NE(state.view.find("momentum.1.weight"), nullptr);
  EXPECT_NE(state.view.find("ema.4.bias"), nullptr);
  EXPECT_EQ(state.tensor(*state.view.find("momentum.4.bias")).to_vector(),
            dynamic_cast<optim::Sgd&>(*a.optimizer).momentum_buffers()[3].to_vector());
}

TEST(Checkpoint, KeepLastPrunesOldAndOrphanedFiles) {
  TempDir dir("dpt_checkpoint");
  Trainer a("sgd", 1);
  spit(dir.file("step-1.safetensors.tmp"), "left by a crashed writer");
  spit(dir.file("step-2.safetensors"), "no JSON: never completed");
  spit(dir.file("notes.txt"), "not ours");
  for (int64_t s : {3, 4, 5, 6}) save(dir.path(), a.objects(), info_at(s), 2);
  EXPECT_EQ(io::checkpoint_steps(dir.path()), (std::vector<int64_t>{5, 6}));
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir.path())) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"notes.txt", "step-5.json", "step-5.optimizer.safetensors",
                                             "step-5.safetensors", "step-6.json",
                                             "step-6.optimizer.safetensors", "step-6.safetensors"}));
  // A run resumed from an earlier checkpoint abandons the later ones: its own stay.
  save(dir.path(), a.objects(), info_at(4), 2);
  EXPECT_EQ(io::checkpoint_steps(dir.path()), (std::vector<int64_t>{4}));
  save(dir.path(), a.objects(), info_at(5), 2);
  EXPECT_EQ(io::checkpoint_steps(dir.path()), (std::vector<int64_t>{4, 5}));
}

TEST(Checkpoint, ResolveFindsTheCheckpointAResumeMeans) {
  TempDir dir("dpt_checkpoint");
  const std::string ckpt = dir.file("checkpoints");
  EXPECT_EQ(io::checkpoint_resolve("auto", ckpt), "");  // nothing yet: a fresh start
  Trainer a("sgd", 1);
  for (int64_t s : {4, 8, 12}) save(ckpt, a.objects(), info_at(s), 0);
  EXPECT_EQ(io::checkpoint_resolve("auto", ckpt), ckpt + "/step-12.json");
  EXPECT_EQ(io::checkpoint_resolve(ckpt, "elsewhere"), ckpt + "/step-12.json");
  EXPECT_EQ(io::checkpoint_resolve(ckpt + "/step-8.safetensors", ""), ckpt + "/step-8.json");
  EXPECT_EQ(io::checkpoint_resolve(ckpt + "/step-4.optimizer.safetensors", ""), ckpt + "/step-4.json");
  EXPECT_THAT(error_of([&] { io::checkpoint_resolve(ckpt + "/step-5.json", ""); }),
              HasSubstr("step-5.json does not exist"));
  EXPECT_THAT(error_of([&] { io::checkpoint_resolve(dir.file("model.pt"), ""); }),
              HasSubstr("expected auto, a checkpoints directory, or a step-<S>.json"));
  fs::create_directories(dir.file("empty"));
  EXPECT_THAT(error_of([&] { io::checkpoint_resolve(dir.file("empty"), ""); }), HasSubstr("no checkpoint"));
}

TEST(Checkpoint, BadCheckpointsAreOneClearError) {
  TempDir dir("dpt_checkpoint");
  Trainer a("sgd", 1);
  const std::string json = save(dir.path(), a.objects(), info_at(3), 0);
  const std::string good = read_file(json);
  const std::string model = dir.file("step-3.safetensors");
  const std::string model_bytes = read_file(model);
  auto load_error = [&](Trainer& t) { return error_of([&] { io::checkpoint_load(json, t.objects()); }); };
  auto with_json = [&](const std::function<void(io::JsonIn&)>& edit) {
    io::JsonIn v = io::json_parse(good, json);
    edit(v);
    spit(json, v.dump());
  };
  Trainer b("sgd", 2);

  // JSON: a missing key, a wrong type, a path out of the directory, a wrong version, an
  // integer that is a fraction or beyond int64 (an error, not rounded or wrapped).
  with_json([](io::JsonIn& v) { v["position"] = {{"step", 3}}; });
  EXPECT_THAT(load_error(b), HasSubstr(json + ": missing key 'position.epoch'"));
  with_json([](io::JsonIn& v) { v["world_size"] = "two"; });
  EXPECT_THAT(load_error(b), HasSubstr(json + ": key 'world_size': expected an integer, got \"two\""));
  with_json([](io::JsonIn& v) { v["model"] = {{"name", "mlp"}, {"file", "../x"}}; });
  EXPECT_THAT(load_error(b), HasSubstr("key 'model.file': expected a file name beside the JSON, got '../x'"));
  with_json([](io::JsonIn& v) { v["version"] = 9; });
  EXPECT_THAT(load_error(b), HasSubstr("this dpt reads version 1, the file is version 9"));
  with_json([](io::JsonIn& v) { v["position"]["step"] = 2.5; });
  EXPECT_THAT(load_error(b), HasSubstr(json + ": key 'position.step': expected an integer, got 2.5"));
  with_json([](io::JsonIn& v) { v["batch_size"] = 9223372036854775808u; });  // one past int64's largest
  EXPECT_THAT(load_error(b),
              HasSubstr(json + ": key 'batch_size': expected an integer, got 9223372036854775808"));
  with_json([](io::JsonIn& v) { v["rng"] = {{"dropout", {"1 2"}}}; });
  EXPECT_THAT(load_error(b), HasSubstr("key 'rng.dropout' entry 0: random generator state"));
  spit(json, good.substr(0, good.size() / 2));
  EXPECT_THAT(load_error(b), HasSubstr(json + ": malformed JSON at byte"));
  spit(json, good);

  // Wrong model or optimizer, by name and by shape.
  Trainer adamw("adamw", 2);
  EXPECT_THAT(load_error(adamw),
              HasSubstr("a checkpoint with sgd optimizer state, but the config's optimizer is adamw"));
  io::TrainingObjects renamed = b.objects();
  renamed.model_name = "mnist_cnn";
  EXPECT_THAT(error_of([&] { io::checkpoint_load(json, renamed); }),
              HasSubstr("a checkpoint of model 'mlp', but the config's model is 'mnist_cnn'"));
  nn::ModulePtr wider =
      models::build_model(YAML::Load("{name: mlp, hidden: [32], dropout: 0.3}"), {1, 4, 4, 3, 0});
  optim::Sgd sgd(optim::param_groups(*wider, 0, true), {0.9f, false});
  EXPECT_THAT(error_of([&] {
                io::checkpoint_load(json, {*wider, "mlp", sgd, "sgd", nullptr});
              }),
              HasSubstr(model + ": tensor '1.weight' has shape [16, 16], the model 'mlp' expects [32, 16]"));

  // Damaged tensor files: truncated, and a header whose offsets lie.
  spit(model, model_bytes.substr(0, model_bytes.size() - 10));
  EXPECT_THAT(load_error(b), HasSubstr(model + ": tensor '4.bias': data_offsets"));
  std::string lying = model_bytes;
  size_t at = lying.find("\"data_offsets\":[0,");
  ASSERT_NE(at, std::string::npos);
  lying[at + std::strlen("\"data_offsets\":[")] = '4';  // "[4,1024]": no longer 16 x 16 floats
  spit(model, lying);
  EXPECT_THAT(load_error(b),
              HasSubstr(model + ": tensor '1.weight': shape [16, 16] of F32 needs 1024 bytes"));
  fs::remove(model);
  EXPECT_THAT(load_error(b), HasSubstr(model + ": cannot open: No such file or directory"));
}

// A checkpoint whose model or optimizer file fails a check (here: a tensor that is not
// part of the model, or optimizer state of the wrong shape) changes nothing: the model,
// the optimizer's tensors and step count, the EMA and the dropout generators stay
// bit-identical, whichever file the bad tensor is in.
TEST(Checkpoint, AFailedLoadLeavesEverythingAsItWas) {
  TempDir dir("dpt_checkpoint");
  Trainer a("adamw", 1);
  a.train(2, 0);
  const std::string json = save(dir.path(), a.objects(), info_at(2), 0);
  const std::string model = dir.file("step-2.safetensors"), state = dir.file("step-2.optimizer.safetensors");
  const std::string model_bytes = read_file(model), state_bytes = read_file(state);
  // Everything a load writes, as bits (floats compared with ==, none of them NaN).
  auto everything = [](Trainer& t) {
    std::vector<float> v = flat(t.model->state_dict());
    for (const auto& s : t.optimizer->state_tensors()) {
      std::vector<float> values = s.value.to_vector();
      v.insert(v.end(), values.begin(), values.end());
    }
    std::vector<float> shadow = flat(t.ema->shadow());
    v.insert(v.end(), shadow.begin(), shadow.end());
    v.push_back(static_cast<float>(t.optimizer->step_count()));
    v.push_back(static_cast<float>(t.ema->updates()));
    std::string generators;
    for (nn::Module* m : t.model->modules())
      if (auto* d = dynamic_cast<nn::Dropout*>(m)) generators += d->rng().state() + ";";
    return std::pair(v, generators);
  };
  auto expect_load_fails_changing_nothing = [&](const std::string& message) {
    Trainer b("adamw", 2);
    b.train(1, 10);
    const auto before = everything(b);
    ASSERT_NE(before, everything(a));  // a load that copied anything would change it
    EXPECT_THAT(error_of([&] { io::checkpoint_load(json, b.objects()); }), HasSubstr(message));
    EXPECT_EQ(everything(b), before);
  };

  // The model file with one tensor too many.
  nn::NamedTensors extended = a.model->state_dict();
  extended.emplace_back("extra", Tensor::zeros({1}));
  io::safetensors_write(model, extended);
  expect_load_fails_changing_nothing(model + ": tensor 'extra' is not part of the model 'mlp'");
  spit(model, model_bytes);

  // A good model file beside an optimizer file with a tensor of the wrong shape.
  io::SafetensorsFile good_state = io::safetensors_read(state);
  nn::NamedTensors bad_state;
  for (const auto& e : good_state.view.tensors)
    bad_state.emplace_back(e.name, e.name == "exp_avg.1.weight" ? Tensor::zeros({3}) : good_state.tensor(e));
  io::safetensors_write(state, bad_state);
  expect_load_fails_changing_nothing(state + ": tensor 'exp_avg.1.weight' has shape [3]");

  // With both files good again, the same load takes the checkpoint's values.
  spit(state, state_bytes);
  Trainer b("adamw", 2);
  io::checkpoint_load(json, b.objects());
  EXPECT_EQ(everything(b), everything(a));
}

TEST(Checkpoint, JsonParserRejectsEveryTruncationAndSurvivesCorruption) {
  TempDir dir("dpt_checkpoint");
  Trainer a("adamw", 1);
  const std::string good = read_file(save(dir.path(), a.objects(), info_at(3), 0));
  io::CheckpointRecord r = io::checkpoint_parse_json(good, "c.json");
  EXPECT_EQ(r.model_file, "step-3.safetensors");
  EXPECT_EQ(r.optimizer_file, "step-3.optimizer.safetensors");
  EXPECT_EQ(r.dropout_rng.size(), 1u);
  // Cut anywhere before its closing brace, the JSON is an error, never a crash.
  for (size_t n = 0; n + 1 < good.size() - 1; n += 7)
    EXPECT_THROW(io::checkpoint_parse_json(good.substr(0, n), "c"), Error);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::string bad = good;
    for (int k = 0; k < 2; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    try {
      io::checkpoint_parse_json(bad, "c.json");
    } catch (const Error&) {
    }
  }
}

TEST(Checkpoint, WithoutEmaStateTheEmaStartsFromTheLoadedWeights) {
  TempDir dir("dpt_checkpoint");
  Trainer a("sgd", 1);
  a.train(2, 0);
  io::TrainingObjects no_ema = a.objects();
  no_ema.ema = nullptr;
  const std::string json = save(dir.path(), no_ema, info_at(2), 0);
  Trainer b("sgd", 2);
  EXPECT_FALSE(io::checkpoint_load(json, b.objects()).has_ema);
  EXPECT_EQ(flat(b.ema->shadow()), flat(b.model->state_dict()));
  EXPECT_EQ(b.ema->updates(), 0);
}

TEST(Checkpoint, ModelWeightsLoadFromPyTorchStyleFiles) {
  TempDir dir("dpt_checkpoint");
  Trainer a("sgd", 1), b("sgd", 2);
  nn::NamedTensors state = a.model->state_dict();
  state.emplace_back("1.num_batches_tracked", Tensor::from_vector(std::vector<int64_t>{7}, {}));
  io::safetensors_write(dir.file("torch.safetensors"), state);
  io::model_load_weights(dir.file("torch.safetensors"), *b.model, "mlp");
  EXPECT_EQ(flat(a.model->state_dict()), flat(b.model->state_dict()));
  state.emplace_back("1.extra", Tensor::zeros({1}));
  io::safetensors_write(dir.file("other.safetensors"), state);
  EXPECT_THAT(error_of([&] { io::model_load_weights(dir.file("other.safetensors"), *b.model, "mlp"); }),
              HasSubstr("tensor '1.extra' is not part of the model 'mlp'"));
}

TEST(Checkpoint, MetricsKeepOnlyTheEpochsTheCheckpointHad) {
  TempDir dir("dpt_checkpoint");
  const std::string path = dir.file("metrics.jsonl");
  spit(path,
       "{\"epoch\": 1, \"a\": 1}\n{\"epoch\": 2, \"a\": 2}\n{\"epoch\": 3, \"a\": 3}\n{\"epoch\": 4, \"a\"");
  io::metrics_keep_epochs(path, 2);
  EXPECT_EQ(read_file(path), "{\"epoch\": 1, \"a\": 1}\n{\"epoch\": 2, \"a\": 2}\n");
  io::metrics_keep_epochs(dir.file("none.jsonl"), 2);
  EXPECT_FALSE(fs::exists(dir.file("none.jsonl")));
}

TEST(RngState, RoundTripsAndContinuesTheSequence) {
  Rng a(123);
  for (int i = 0; i < 10; ++i) a.next_u64();
  Rng b(9);
  b.set_state(a.state());
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.next_u64(), b.next_u64());
  EXPECT_THAT(error_of([&] { b.set_state("1 2 3"); }), HasSubstr("random generator state"));
  EXPECT_THAT(error_of([&] { b.set_state(a.state() + " 5"); }), HasSubstr("random generator state"));
}

TEST(Sampler, RestOfAShardAfterAResume) {
  const int64_t n = 103;
  for (int world : {1, 2, 3}) {
    for (int rank = 0; rank < world; ++rank) {
      std::vector<int64_t> whole = data::train_shard(n, 5, 2, rank, world, true);
      // Same world size: exactly the samples the first k steps of batch 4 did not use.
      for (int64_t k : {0, 1, 5}) {
        std::vector<int64_t> rest = data::train_shard_rest(n, 5, 2, rank, world, true, k * 4 * world);
        EXPECT_EQ(rest, std::vector<int64_t>(whole.begin() + k * 4, whole.end()));
      }
      EXPECT_TRUE(data::train_shard_rest(n, 5, 2, rank, world, true, 1000).empty());
    }
  }
  // 2 ranks trained 3 steps of batch 4 (positions 0..23 of the epoch's order); 3 ranks go on
  // from position 24 / 3 * 3 = 24.
  std::vector<int64_t> order = data::train_shard(n, 5, 2, 0, 1, true);
  for (int rank = 0; rank < 3; ++rank) {
    std::vector<int64_t> rest = data::train_shard_rest(n, 5, 2, rank, 3, true, 24);
    EXPECT_EQ(rest.front(), order[24 + rank]);
  }
}

TEST(NonfiniteGuard, SpotsNanAndInfGradientsAndRestoresBuffersWhenSkipping) {
  auto bn = std::make_shared<nn::BatchNorm2d>(2);
  const std::vector<float> before = flat(bn->named_buffers());
  optim::Sgd sgd(optim::param_groups(*bn, 0.0f, false), {});
  optim::NonfiniteGuard guard(*bn, sgd, true, true);
  Tensor x = Tensor::empty({4, 2, 3, 3});
  Rng(3).fill_normal(x, 1, 2);
  for (float bad : {NAN, INFINITY, -INFINITY, 1.0f}) {
    guard.before_forward();
    Tensor loss = mean((*bn)(x));
    loss.backward();
    ASSERT_NE(flat(bn->named_buffers()), before);  // the forward pass moved the running statistics
    std::vector<float> g = bn->named_parameters()[0].second.grad().to_vector();
    g[1] = bad;
    bn->named_parameters()[0].second.grad().copy_from(Tensor::from_vector(g, {2}));
    const bool finite = std::isfinite(bad);
    EXPECT_EQ(guard.step_finite(loss), finite) << bad;
    if (!finite) {
      EXPECT_EQ(flat(bn->named_buffers()), before);
    }
    bn->named_parameters()[0].second.grad().zero_();
    bn->named_parameters()[1].second.grad().zero_();
  }
  optim::NonfiniteGuard loss_only(*bn, sgd, false, true);
  EXPECT_FALSE(loss_only.step_finite(Tensor::full({}, NAN)));
  optim::NonfiniteGuard ranks(*bn, sgd, false, false);  // several ranks: the local loss does not count
  EXPECT_TRUE(ranks.step_finite(Tensor::full({}, NAN)));
}

TEST(CheckpointConfig, KeysParseRoundTripAndRejectBadValues) {
  TempDir dir("dpt_checkpoint");
  const std::string path = dir.file("c.yaml");
  spit(path,
       "model: {name: mlp}\ndeterministic: true\non_nonfinite: skip\ncheckpoint: {every_epochs: 2, "
       "keep_last: 0}\n");
  io::Config c = io::load_config(path);
  EXPECT_TRUE(c.deterministic);
  EXPECT_EQ(c.on_nonfinite, io::NonfiniteAction::skip);
  EXPECT_EQ(c.checkpoint.every_epochs, 2);
  EXPECT_EQ(c.checkpoint.keep_last, 0);
  spit(dir.file("back.yaml"), io::config_to_yaml(c));
  io::Config back = io::load_config(dir.file("back.yaml"));
  EXPECT_EQ(io::config_to_yaml(back), io::config_to_yaml(c));
  io::Config defaults = io::load_config(path, {"checkpoint={}", "deterministic=false", "on_nonfinite=stop"});
  EXPECT_EQ(defaults.checkpoint.every_epochs, 1);
  EXPECT_EQ(defaults.checkpoint.keep_last, 3);
  EXPECT_THAT(error_of([&] { io::load_config(path, {"on_nonfinite=ignore"}); }),
              HasSubstr("unknown action 'ignore' (expected one of: stop, skip)"));
  EXPECT_THAT(error_of([&] { io::load_config(path, {"checkpoint.keep_last=-1"}); }),
              HasSubstr("checkpoint.keep_last"));
  EXPECT_THAT(error_of([&] { io::load_config(path, {"checkpoint.every=1"}); }),
              HasSubstr("unknown key 'checkpoint.every'"));
}
