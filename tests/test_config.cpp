// Tests for io/config: a full file, the defaults, --set overrides, the YAML written back
// for the run directory, and one clear line for each kind of bad input (the line
// train.cpp prints before exiting with code 2).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <variant>

#include "core/error.h"
#include "error_of.h"
#include "io/atomic_file.h"
#include "io/config.h"
#include "io/config_schema.h"
#include "models/registry.h"

using namespace dpt;
using namespace dpt::io;
using ::testing::Contains;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;
namespace fs = std::filesystem;

namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "dpt_config_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `text` to <tmp>/<name> and returns the path.
  std::string write(const std::string& text, const std::string& name = "x.yaml") {
    std::string path = (fs::path(dir_) / name).string();
    std::ofstream(path) << text;
    return path;
  }
  Config load(const std::string& text, const std::vector<std::string>& overrides = {}) {
    return load_config(write(text), overrides);
  }
  // The dpt::Error message loading `text` gives ("" and a failure if it loads).
  std::string error(const std::string& text, const std::vector<std::string>& overrides = {}) {
    try {
      load(text, overrides);
    } catch (const Error& e) {
      std::string message = e.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
      return message;
    }
    ADD_FAILURE() << "expected an error for:\n" << text;
    return "";
  }
  std::string path(const std::string& name = "x.yaml") const { return (fs::path(dir_) / name).string(); }

  std::string dir_;
};

const char* kFull = R"(# a complete config
model: {name: mnist_cnn, dropout: 0.25, widths: [32, 64]}
dataset: {name: mnist, path: /data/mnist, augment: true}
epochs: 3
batch_size: 64
eval_batch_size: 500
threads: 2
seed: 17
label_smoothing: 0.1
log_every: 20
max_steps_per_epoch: 100
optimizer:
  name: sgd
  lr: 0.05
  momentum: 0.8
  nesterov: true
  weight_decay: 5.0e-4
  no_decay_bias_bn: false
schedule: {name: multistep, warmup_epochs: 1, milestones: [2, 3], gamma: 0.5}
output: {dir: runs/full}
)";

}  // namespace

TEST_F(ConfigTest, FullFileParsesToTheGivenValues) {
  Config c = load(kFull);
  EXPECT_EQ(c.model.name, "mnist_cnn");
  EXPECT_EQ(c.model.node["dropout"].as<double>(), 0.25);  // model keys are kept for the builder
  EXPECT_EQ(c.model.node["widths"][1].as<int>(), 64);
  EXPECT_EQ(c.dataset.name, DatasetName::mnist);
  EXPECT_EQ(c.dataset.path, "/data/mnist");
  EXPECT_TRUE(c.dataset.augment);
  EXPECT_EQ(c.epochs, 3);
  EXPECT_EQ(c.batch_size, 64);
  EXPECT_EQ(c.eval_batch_size, 500);
  EXPECT_EQ(c.threads, 2);
  EXPECT_EQ(c.seed, 17u);
  EXPECT_DOUBLE_EQ(c.label_smoothing, 0.1);
  EXPECT_EQ(c.log_every, 20);
  EXPECT_EQ(c.max_steps_per_epoch, 100);
  EXPECT_EQ(c.optimizer.name, OptimizerName::sgd);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.05);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.8);
  EXPECT_TRUE(c.optimizer.nesterov);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 5e-4);
  EXPECT_FALSE(c.optimizer.no_decay_bias_bn);
  EXPECT_EQ(c.schedule.kind, optim::ScheduleKind::multistep);
  EXPECT_EQ(c.schedule.warmup_epochs, 1);
  EXPECT_EQ(c.schedule.milestones, (std::vector<int64_t>{2, 3}));
  EXPECT_DOUBLE_EQ(c.schedule.gamma, 0.5);
  EXPECT_EQ(c.output.dir, "runs/full");
  EXPECT_EQ(c.source, path());
}

TEST_F(ConfigTest, Defaults) {
  Config c = load_config(write("model: {name: mlp}\n", "my_run.yaml"));
  EXPECT_EQ(c.model.name, "mlp");
  EXPECT_EQ(c.dataset.name, DatasetName::fashion_mnist);
  EXPECT_EQ(c.dataset.path, "/usr/share/datasets/fashion-mnist");
  EXPECT_FALSE(c.dataset.augment);
  EXPECT_EQ(c.epochs, 1);
  EXPECT_EQ(c.batch_size, 128);
  EXPECT_EQ(c.eval_batch_size, 1000);
  EXPECT_EQ(c.threads, 0);
  EXPECT_EQ(c.seed, 0u);
  EXPECT_EQ(c.label_smoothing, 0);
  EXPECT_EQ(c.log_every, 50);
  EXPECT_EQ(c.max_steps_per_epoch, 0);
  EXPECT_EQ(c.optimizer.name, OptimizerName::sgd);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.1);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.9);
  EXPECT_FALSE(c.optimizer.nesterov);
  EXPECT_EQ(c.optimizer.weight_decay, 0);
  EXPECT_TRUE(c.optimizer.no_decay_bias_bn);
  EXPECT_EQ(c.schedule.kind, optim::ScheduleKind::constant);
  EXPECT_EQ(c.schedule.warmup_epochs, 0);
  EXPECT_EQ(c.output.dir, "runs/my_run");

  EXPECT_EQ(load("model: {name: m}\ndataset: {name: mnist}\n").dataset.path, "data/mnist");
  Config cifar = load("model: {name: m}\ndataset: {name: cifar10}\n");
  EXPECT_EQ(cifar.dataset.path, "data/cifar10/cifar-10-batches-bin");
  EXPECT_TRUE(cifar.dataset.shape.empty());  // synthetic's keys do not apply: the files give the shape
  EXPECT_EQ(cifar.dataset.classes, 0);
  EXPECT_FALSE(cifar.dataset.augment);
  EXPECT_TRUE(load("model: {name: m}\ndataset: {name: cifar10, path: /c, augment: true}\n").dataset.augment);
  EXPECT_TRUE(load("model: {name: m}\ndataset: {name: synthetic, augment: true}\n").dataset.augment);
  EXPECT_TRUE(load("model: {name: m}\n", {"dataset.augment=true"}).dataset.augment);
  Config adamw = load("model: {name: m}\noptimizer: {name: adamw}\n");
  EXPECT_EQ(adamw.optimizer.momentum, 0);  // keys that do not apply stay value-initialised
  EXPECT_TRUE(c.optimizer.betas.empty());
  EXPECT_DOUBLE_EQ(load("model: {name: m}\n", {"optimizer.name=adamw"}).optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(adamw.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(adamw.optimizer.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(adamw.optimizer.betas[1], 0.999);
  EXPECT_DOUBLE_EQ(adamw.optimizer.eps, 1e-8);
  Config synthetic =
      load("model: {name: m}\ndataset: {name: synthetic, shape: [3, 32, 32], classes: 100, size: 512}\n");
  EXPECT_EQ(synthetic.dataset.shape, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(synthetic.dataset.classes, 100);
  EXPECT_EQ(synthetic.dataset.size, 512);
  Config cosine = load("model: {name: m}\nschedule: {name: cosine, min_lr: 0.001}\n");
  EXPECT_DOUBLE_EQ(cosine.schedule.min_lr, 0.001);
}

TEST_F(ConfigTest, FaultKeys) {
  Config c = load("model: {name: m}\n");
  EXPECT_DOUBLE_EQ(c.distributed.timeout_s, 1800);
  EXPECT_EQ(c.debug, DebugMode::none);
  c = load("model: {name: m}\ndistributed: {timeout_s: 2.5}\ndebug: collectives\n");
  EXPECT_DOUBLE_EQ(c.distributed.timeout_s, 2.5);
  EXPECT_EQ(c.debug, DebugMode::collectives);
  EXPECT_DOUBLE_EQ(load("model: {name: m}\n", {"distributed.timeout_s=0"}).distributed.timeout_s, 0);
  Config again = load_config(write(config_to_yaml(c), "again.yaml"));
  EXPECT_DOUBLE_EQ(again.distributed.timeout_s, 2.5);
  EXPECT_EQ(again.debug, DebugMode::collectives);
}

TEST_F(ConfigTest, SetOverridesScalarsListsAndNewSections) {
  Config c = load(kFull, {"optimizer.lr=0.2", "schedule.milestones=[2,4]", "epochs=5", "model.dropout=0.5",
                          "output.dir=runs/other"});
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.2);
  EXPECT_EQ(c.schedule.milestones, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(c.epochs, 5);
  EXPECT_EQ(c.model.node["dropout"].as<double>(), 0.5);
  EXPECT_EQ(c.output.dir, "runs/other");
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.8);  // untouched keys stay

  // Sections the file does not have are created; the last override of a key wins.
  Config d = load("model: {name: m}\n", {"schedule.name=cosine", "schedule.min_lr=0.01", "seed=1", "seed=2"});
  EXPECT_EQ(d.schedule.kind, optim::ScheduleKind::cosine);
  EXPECT_DOUBLE_EQ(d.schedule.min_lr, 0.01);
  EXPECT_EQ(d.seed, 2u);
  // A whole section as a YAML map: the way to switch optimizer without leftover keys.
  Config e = load(kFull, {"optimizer={name: adamw, lr: 0.003}"});
  EXPECT_EQ(e.optimizer.name, OptimizerName::adamw);
  EXPECT_DOUBLE_EQ(e.optimizer.lr, 0.003);
}

TEST_F(ConfigTest, ResolvedYamlRoundTrips) {
  for (const char* text : {kFull, "model: {name: m}\n",
                           "model: {name: m}\noptimizer: {name: adamw, betas: [0.8, 0.99], eps: 1.0e-6}\n"
                           "dataset: {name: synthetic, shape: [3, 8, 8], classes: 5, size: 64}\n"
                           "schedule: {name: cosine, min_lr: 1.0e-5}\n",
                           "model: {name: m}\ndataset: {name: cifar10, augment: true}\n"}) {
    Config a = load(text);
    std::string yaml = config_to_yaml(a);
    Config b = load_config(write(yaml, "x_again.yaml"));
    EXPECT_EQ(yaml, config_to_yaml(b)) << yaml;
    EXPECT_DOUBLE_EQ(a.optimizer.lr, b.optimizer.lr);
    EXPECT_EQ(a.dataset.name, b.dataset.name);
    EXPECT_EQ(a.dataset.path, b.dataset.path);
    EXPECT_EQ(a.dataset.augment, b.dataset.augment);
    EXPECT_EQ(a.output.dir, b.output.dir);  // stays runs/x, not runs/x_again
  }
  EXPECT_THAT(config_to_yaml(load(kFull)), HasSubstr("lr: 0.05\n"));
}

TEST_F(ConfigTest, MissingFile) {
  try {
    load_config("no/such/x.yaml", {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "config file 'no/such/x.yaml' not found");
  }
}

TEST_F(ConfigTest, MalformedYamlGivesFileLineAndColumn) {
  std::string message = error("model: {name: m}\nepochs: 3\noptimizer: {name: sgd, lr: [0.1}\n");
  EXPECT_THAT(message, HasSubstr(path() + ":3:"));
  EXPECT_THAT(message, HasSubstr("malformed YAML"));
}

TEST_F(ConfigTest, UnknownKeysAtAnyLevelButModel) {
  std::string message = error("model: {name: m, anything: [1, 2]}\noptimizer:\n  name: sgd\n  lrr: 0.1\n");
  EXPECT_THAT(message,
              HasSubstr(path() + ":4: unknown key 'optimizer.lrr' (expected one of: name, lr, momentum, "
                                 "nesterov, weight_decay"));
  EXPECT_THAT(error("model: {name: m}\nepoch: 3\n"),
              HasSubstr(":2: unknown key 'epoch' (expected one of: model, dataset, epochs,"));
  EXPECT_THAT(error("model: {name: m}\noutput: {dir: a, file: b}\n"),
              HasSubstr("unknown key 'output.file' (expected one of: dir)"));
  EXPECT_THAT(
      error("model: {name: m}\noptimizer: {name: adamw, momentum: 0.9}\n"),
      HasSubstr(
          ":2: key 'optimizer.momentum' does not apply to optimizer 'adamw' (its keys: name, lr, betas"));
  // The keys listed are those of the chosen optimizer.
  EXPECT_THAT(
      error("model: {name: m}\noptimizer: {name: adamw, lrr: 1}\n"),
      HasSubstr(":2: unknown key 'optimizer.lrr' (expected one of: name, lr, betas, eps, weight_decay, "
                "no_decay_bias_bn, shard)"));
  EXPECT_THAT(error("model: {name: m}\ndataset: {name: mnist, size: 10}\n"),
              HasSubstr("key 'dataset.size' does not apply to dataset 'mnist'"));
  EXPECT_THAT(
      error("model: {name: m}\ndataset: {name: cifar10, shape: [3, 32, 32]}\n"),
      HasSubstr("key 'dataset.shape' does not apply to dataset 'cifar10' (its keys: name, path, augment)"));
  EXPECT_THAT(error("model: {name: m}\nepochs: 2\nepochs: 3\n"),
              HasSubstr(":3: duplicate key 'epochs' (first given at line 2)"));
}

TEST_F(ConfigTest, CudaGraphsKey) {
  EXPECT_FALSE(load("model: {name: m}\n").cuda_graphs);
  Config c = load("model: {name: m}\ncuda_graphs: true\n");
  EXPECT_TRUE(c.cuda_graphs);
  EXPECT_TRUE(load_config(write(config_to_yaml(c), "again.yaml")).cuda_graphs);
  EXPECT_TRUE(load("model: {name: m}\n", {"cuda_graphs=true"}).cuda_graphs);
  EXPECT_THAT(error("model: {name: m}\ncuda_graphs: sometimes\n"),
              HasSubstr(":2: key 'cuda_graphs': expected true or false, got 'sometimes'"));
  // A graph cannot skip its update, whichever key comes first.
  for (const char* yaml : {"model: {name: m}\non_nonfinite: skip\ncuda_graphs: true\n",
                           "model: {name: m}\ncuda_graphs: true\non_nonfinite: skip\n"})
    EXPECT_THAT(error(yaml),
                HasSubstr("cuda_graphs: true needs on_nonfinite: stop (a captured step cannot skip "
                          "its update), got on_nonfinite: skip"));
  EXPECT_TRUE(load("model: {name: m}\non_nonfinite: skip\ncuda_graphs: false\n").on_nonfinite ==
              NonfiniteAction::skip);
}

// One row per bad value: the YAML after "model: {name: m}\n" and what the message must say.
struct BadValue {
  const char* yaml;
  const char* expected;
};

void PrintTo(const BadValue& bad, std::ostream* out) { *out << bad.yaml; }

class ConfigBadValue : public ConfigTest, public ::testing::WithParamInterface<BadValue> {};

TEST_P(ConfigBadValue, OneClearLine) {
  const BadValue& bad = GetParam();
  std::string message = error(std::string("model: {name: m}\n") + bad.yaml);
  EXPECT_THAT(message, HasSubstr(path() + ":"));
  EXPECT_THAT(message, HasSubstr(bad.expected));
}

INSTANTIATE_TEST_SUITE_P(
    Config, ConfigBadValue,
    ::testing::Values(
        BadValue{"epochs: three\n", ":2: key 'epochs': expected a positive integer, got 'three'"},
        BadValue{"epochs: 0\n", "key 'epochs': expected a positive integer, got '0'"},
        BadValue{"epochs: 2.5\n", "key 'epochs': expected a positive integer, got '2.5'"},
        BadValue{"batch_size: 0\n", "key 'batch_size': expected a positive integer, got '0'"},
        BadValue{"batch_size: [1]\n", "key 'batch_size': expected a positive integer, got [1]"},
        BadValue{"eval_batch_size: -5\n", "key 'eval_batch_size': expected a positive integer, got '-5'"},
        BadValue{"threads: -1\n", "key 'threads': expected an integer in [0, 1024]"},
        BadValue{"threads: 100000\n",
                 "key 'threads': expected an integer in [0, 1024] (0 = this process's share "
                 "of the cores), got '100000'"},
        BadValue{"distributed: {timeout_s: -1}\n",
                 "key 'distributed.timeout_s': expected a number of seconds in [0, 1e9] (0 = wait forever), "
                 "got '-1'"},
        BadValue{"distributed: {timeout_s: soon}\n",
                 "key 'distributed.timeout_s': expected a number of seconds"},
        BadValue{"debug: all\n",
                 ":2: key 'debug': unknown debug mode 'all' (expected one of: none, collectives)"},
        BadValue{"seed: -1\n", "key 'seed': expected a non-negative integer, got '-1'"},
        BadValue{"log_every: 0\n", "key 'log_every': expected a positive integer"},
        BadValue{"label_smoothing: 1.0\n", "key 'label_smoothing': expected a number in [0, 1), got '1.0'"},
        BadValue{"optimizer: {lr: -0.1}\n", ":2: key 'optimizer.lr': expected a number > 0, got '-0.1'"},
        BadValue{"optimizer: {lr: fast}\n", "key 'optimizer.lr': expected a number > 0, got 'fast'"},
        BadValue{"optimizer: {momentum: 1.0}\n",
                 "key 'optimizer.momentum': expected a number in [0, 1), got '1.0'"},
        BadValue{"optimizer: {nesterov: maybe}\n",
                 "key 'optimizer.nesterov': expected true or false, got 'maybe'"},
        BadValue{"optimizer: {weight_decay: -1}\n", "key 'optimizer.weight_decay': expected a number >= 0"},
        BadValue{"optimizer: {name: adam}\n",
                 "key 'optimizer.name': unknown optimizer 'adam' (expected one of: sgd, adamw)"},
        BadValue{"optimizer: {name: adamw, betas: [0.9]}\n",
                 "key 'optimizer.betas': expected two numbers in [0, 1)"},
        BadValue{
            "schedule: {name: step}\n",
            "key 'schedule.name': unknown schedule 'step' (expected one of: constant, multistep, cosine)"},
        BadValue{"schedule: {name: multistep}\n", "schedule 'multistep' needs key 'schedule.milestones'"},
        BadValue{"schedule: {name: multistep, milestones: [3, 2]}\n",
                 "key 'schedule.milestones': expected a list of positive, strictly increasing epochs, e.g. "
                 "[30, 60], got [3, 2]"},
        BadValue{"schedule: {name: cosine, min_lr: 1.0}\n",
                 "key 'schedule.min_lr': expected a number in [0, optimizer.lr = 0.1], got '1.0'"},
        BadValue{"schedule: {warmup_epochs: -1}\n",
                 "key 'schedule.warmup_epochs': expected a non-negative integer"},
        BadValue{"dataset: {name: cifar100}\n",
                 "key 'dataset.name': unknown dataset 'cifar100' (expected one of: fashion_mnist, mnist, "
                 "cifar10, synthetic)"},
        BadValue{"dataset: {name: cifar10, augment: yes please}\n",
                 ":2: key 'dataset.augment': expected true or false, got 'yes please'"},
        BadValue{"dataset: mnist\n",
                 "key 'dataset': expected a mapping of keys (name, path, shape, classes, size, augment)"},
        BadValue{"dataset: {name: synthetic, shape: [28, 28]}\n",
                 "key 'dataset.shape': expected 3 positive integers [channels, height, width], got [28, 28]"},
        BadValue{"output: {dir: ''}\n", "key 'output.dir': expected a non-empty string, got ''"}));

TEST_F(ConfigTest, ModelIsRequired) {
  EXPECT_THAT(error("epochs: 3\n"), HasSubstr("missing key 'model'"));
  EXPECT_THAT(error("model: {dropout: 0.1}\n"), HasSubstr(":1: missing key 'model.name'"));
  EXPECT_THAT(error("model: mnist_cnn\n"), HasSubstr("key 'model': expected a mapping with at least 'name'"));
  EXPECT_THAT(error(""), HasSubstr(path() + ": the config is empty"));
  EXPECT_THAT(error("- a\n- b\n"), HasSubstr("expected a mapping of keys at the top level, got a list"));
}

TEST_F(ConfigTest, BadOverrides) {
  const std::string base = "model: {name: m}\noptimizer: {name: sgd}\n";
  EXPECT_THAT(
      error(base, {"optimizer.lrr=0.1"}),
      HasSubstr("--set optimizer.lrr=0.1: unknown key 'optimizer.lrr' (expected one of: name, lr, momentum"));
  EXPECT_THAT(error(base, {"learning_rate=0.1"}),
              HasSubstr("unknown key 'learning_rate' (expected one of: model,"));
  EXPECT_THAT(error(base, {"epochs.x=1"}),
              HasSubstr("unknown key 'epochs.x' ('epochs' holds a value, not keys)"));
  EXPECT_THAT(error(base, {"optimizer.lr"}), HasSubstr("--set optimizer.lr: expected key=value"));
  EXPECT_THAT(error(base, {"optimizer..lr=1"}), HasSubstr("malformed key 'optimizer..lr'"));
  EXPECT_THAT(error(base, {"schedule.milestones=[2,4"}),
              HasSubstr("--set schedule.milestones=[2,4: malformed YAML value"));
  // A bad value from --set is reported against the --set, not a line of the file.
  EXPECT_THAT(error(base, {"epochs=three"}),
              HasSubstr("--set epochs=three: key 'epochs': expected a positive integer, got 'three'"));
  EXPECT_THAT(error(base, {"optimizer.momentum=2"}),
              HasSubstr("--set optimizer.momentum=2: key 'optimizer.momentum'"));
  EXPECT_THAT(
      error("model: {name: m}\noptimizer: sgd\n", {"optimizer.lr=0.1"}),
      HasSubstr("cannot set a key inside 'optimizer', which the config gives as 'sgd', not a mapping"));
}

TEST(ConfigEma, DecayIsReadAndChecked) {
  namespace fs = std::filesystem;
  fs::path path = fs::temp_directory_path() / ("dpt_ema_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << "model: {name: mlp}\nema_decay: 0.999\n";
  EXPECT_DOUBLE_EQ(dpt::io::load_config(path.string()).ema_decay, 0.999);
  EXPECT_THAT(dpt::testing::error_of([&] { dpt::io::load_config(path.string(), {"ema_decay=1.5"}); }),
              ::testing::HasSubstr("ema_decay"));
  fs::remove(path);
}

// --- the schema itself (io/config_schema.cpp)

// Every name of every choice loads with the defaults of the keys it brings, and is written
// back under that name.
TEST_F(ConfigTest, EveryChoiceLoadsWithItsDefaultsAndRoundTrips) {
  Config scratch{};
  int choices = 0;
  for (const Key& key : config_keys(scratch)) {
    const Choice* choice = std::get_if<Choice>(&key.field);
    if (!choice) continue;
    for (const std::string& name : *choice->names) {
      SCOPED_TRACE(key.path + "=" + name);
      std::vector<std::string> set = {key.path + "=" + name};
      if (name == "multistep") set.push_back("schedule.milestones=[1]");  // required there
      const std::string yaml = config_to_yaml(load("model: {name: m}\n", set));
      EXPECT_THAT(yaml, HasSubstr(key.path.substr(key.path.rfind('.') + 1) + ": " + name + "\n"));
      EXPECT_EQ(config_to_yaml(load_config(write(yaml, "x_again.yaml"))), yaml);
      ++choices;
    }
  }
  EXPECT_EQ(choices, 30);  // pipeline.schedule: gpipe and 1f1b among them
}

// A typo in only() or default_if() would make a key apply nowhere, or a default never used.
TEST(ConfigSchema, OnlyAndDefaultIfNameChoicesOfTheirSection) {
  Config scratch{};
  const std::vector<Key> keys = config_keys(scratch);
  std::map<std::string, const std::vector<std::string>*> selectors;  // section -> its names
  for (const Key& key : keys) {
    const Choice* choice = std::get_if<Choice>(&key.field);
    if (choice && key.path.ends_with(".name"))
      selectors[key.path.substr(0, key.path.find('.'))] = choice->names;
  }
  EXPECT_EQ(selectors.size(), 3u);  // dataset, optimizer, schedule
  for (const Key& key : keys) {
    std::vector<std::string> named = key.applies_to;
    for (const auto& [name, value] : key.name_defaults) named.push_back(name);
    if (named.empty()) continue;
    SCOPED_TRACE(key.path);
    auto it = selectors.find(key.path.substr(0, key.path.find('.')));
    ASSERT_NE(it, selectors.end()) << "only() or default_if() in a section without a `name` choice";
    for (const std::string& name : named) EXPECT_THAT(*it->second, Contains(name));
  }
}

// kEnumNames lists each enum's names in declaration order; a swap would read bf16 as fp32.
TEST(ConfigSchema, EnumNamesMatchTheirValues) {
  EXPECT_EQ(name_of(DatasetName::fashion_mnist), "fashion_mnist");
  EXPECT_EQ(name_of(DatasetName::mnist), "mnist");
  EXPECT_EQ(name_of(DatasetName::cifar10), "cifar10");
  EXPECT_EQ(name_of(DatasetName::synthetic), "synthetic");
  EXPECT_EQ(name_of(OptimizerName::sgd), "sgd");
  EXPECT_EQ(name_of(OptimizerName::adamw), "adamw");
  EXPECT_EQ(name_of(optim::ScheduleKind::constant), "constant");
  EXPECT_EQ(name_of(optim::ScheduleKind::multistep), "multistep");
  EXPECT_EQ(name_of(optim::ScheduleKind::cosine), "cosine");
  EXPECT_EQ(name_of(LrScaling::none), "none");
  EXPECT_EQ(name_of(LrScaling::linear), "linear");
  EXPECT_EQ(name_of(CommBackend::automatic), "auto");
  EXPECT_EQ(name_of(CommBackend::mpi), "mpi");
  EXPECT_EQ(name_of(CommBackend::nccl), "nccl");
  EXPECT_EQ(name_of(DebugMode::none), "none");
  EXPECT_EQ(name_of(DebugMode::collectives), "collectives");
  EXPECT_EQ(name_of(dist::DeviceSetting::automatic), "auto");
  EXPECT_EQ(name_of(dist::DeviceSetting::cpu), "cpu");
  EXPECT_EQ(name_of(dist::DeviceSetting::cuda), "cuda");
  EXPECT_EQ(name_of(Precision::fp32), "fp32");
  EXPECT_EQ(name_of(Precision::bf16), "bf16");
  EXPECT_EQ(name_of(NonfiniteAction::stop), "stop");
  EXPECT_EQ(name_of(NonfiniteAction::skip), "skip");
}

TEST(ConfigSchema, DocsTableHasOneRowPerKey) {
  const std::string table = config_keys_markdown();
  Config scratch{};
  const std::vector<Key> keys = config_keys(scratch);
  for (const Key& key : keys) EXPECT_THAT(table, HasSubstr("\n| `" + key.path + "` | "));
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), static_cast<long>(keys.size() + 2));  // + header
  // The default per choice, the range as the error message says it, where a key applies.
  EXPECT_THAT(table, HasSubstr("| `optimizer.lr` | `0.1`; adamw: `0.001` | a number > 0 |  |"));
  EXPECT_THAT(table, HasSubstr("| `optimizer.momentum` | `0.9` | a number in [0, 1) | `sgd` |"));
  EXPECT_THAT(table,
              HasSubstr("| `schedule.milestones` | required | a list of positive, strictly increasing"));
  EXPECT_THAT(table,
              HasSubstr("| `distributed.timeout_s` | `1800` | a number of seconds in [0, 1e9] (0 = wait "
                        "forever) |"));
  EXPECT_THAT(table, HasSubstr("| `device` | `auto` | `auto`, `cpu`, `cuda` |"));
}

// build/config_table: --check fails on a stale table and passes once the tool has rewritten
// it; the text around the markers is kept.
TEST_F(ConfigTest, ConfigTableRewritesAndChecksAPage) {
  const char* build_dir = std::getenv("DPT_BUILD_DIR");  // CTest runs tests in the build directory
  const std::string tool = std::string(build_dir ? build_dir : ".") + "/config_table";
  ASSERT_TRUE(fs::exists(tool)) << tool << " not built (DPT_BUILD_DIR)";
  auto run = [&](const std::string& args) {
    int status = std::system((tool + " " + args + " > /dev/null 2>&1").c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  const std::string begin =
      "<!-- config-keys: made by build/config_table from framework/io/config_schema.cpp -->";
  const std::string page =
      write("# Page\n\n" + begin + "\n| stale |\n<!-- /config-keys -->\n\nafter\n", "page.md");
  EXPECT_EQ(run("--check " + page), 1);
  EXPECT_EQ(run(page), 0);
  EXPECT_EQ(run("--check " + page), 0);
  const std::string text = read_file(page);
  EXPECT_THAT(text,
              StartsWith("# Page\n\n" + begin + "\n" + config_keys_markdown() + "<!-- /config-keys -->"));
  EXPECT_THAT(text, EndsWith("-->\n\nafter\n"));
  EXPECT_EQ(run("--check " + write("no markers\n", "bare.md")), 2);
}

// Every config the project ships parses, and its model builds for its dataset's shape.
TEST(ShippedConfigs, AllLoadAndBuildTheirModel) {
  namespace fs = std::filesystem;
  const char* source = std::getenv("DPT_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "DPT_SOURCE_DIR is set by CTest";
  int count = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(source) / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    dpt::io::Config c = dpt::io::load_config(entry.path().string());
    bool cifar = c.dataset.name == dpt::io::DatasetName::cifar10;
    dpt::models::ModelSpec spec{cifar ? 3 : 1, cifar ? 32 : 28, cifar ? 32 : 28, 10, 0};
    if (c.dataset.name == dpt::io::DatasetName::synthetic)
      spec = {c.dataset.shape[0], c.dataset.shape[1], c.dataset.shape[2], 10, 0};
    // A tensor-parallel model needs its mesh (test_train_mesh trains one); here, its unsplit twin.
    YAML::Node model = YAML::Clone(c.model.node);
    if (model["tensor_parallel"]) model["tensor_parallel"] = false;
    EXPECT_GT(dpt::models::build_model(model, spec)->parameter_count(), 0);
    ++count;
  }
  EXPECT_GE(count, 6);
}
