// YAML -> Config. The schema (which keys exist, which apply to which optimizer, schedule
// and dataset) is written once as tables at the top; a Reader turns every problem into
// one line that says where (file:line, or the --set that caused it), which key, what was
// expected and what was found.
#include "io/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"

namespace dpt::io {
namespace {

using Keys = std::vector<std::string>;

const Keys kTopKeys = {"model",     "dataset",  "epochs",          "batch_size", "eval_batch_size",
                       "threads",   "seed",     "label_smoothing", "log_every",  "max_steps_per_epoch",
                       "optimizer", "schedule", "output",          "distributed", "lr_scaling", "ema_decay",
                       "deterministic", "on_nonfinite", "checkpoint", "debug",
                       "device", "cuda_graphs", "precision", "channels_last"};
// Every key each section may hold; `model` is free-form and not listed.
const std::map<std::string, Keys> kSectionKeys = {
    {"dataset", {"name", "path", "shape", "classes", "size", "augment"}},
    {"optimizer", {"name", "lr", "momentum", "nesterov", "weight_decay", "no_decay_bias_bn", "betas", "eps"}},
    {"schedule", {"name", "warmup_epochs", "milestones", "gamma", "min_lr"}},
    {"output", {"dir"}},
    {"checkpoint", {"every_epochs", "keep_last"}},
    {"distributed", {"bucket_cap_mb", "sync_bn", "find_unused_parameters", "backend", "timeout_s"}},
};
// The keys that apply to each choice of `name`.
const std::map<std::string, Keys> kDatasetKeys = {
    {"fashion_mnist", {"name", "path", "augment"}},
    {"mnist", {"name", "path", "augment"}},
    {"cifar10", {"name", "path", "augment"}},
    {"synthetic", {"name", "shape", "classes", "size", "augment"}},
};
const std::map<std::string, Keys> kOptimizerKeys = {
    {"sgd", {"name", "lr", "momentum", "nesterov", "weight_decay", "no_decay_bias_bn"}},
    {"adamw", {"name", "lr", "betas", "eps", "weight_decay", "no_decay_bias_bn"}},
};
const std::map<std::string, Keys> kScheduleKeys = {
    {"constant", {"name", "warmup_epochs"}},
    {"multistep", {"name", "warmup_epochs", "milestones", "gamma"}},
    {"cosine", {"name", "warmup_epochs", "min_lr"}},
};
// Sorted by how the schema lists them, not alphabetically: the first is the default.
const Keys kDatasetNames = {"fashion_mnist", "mnist", "cifar10", "synthetic"};
const Keys kOptimizerNames = {"sgd", "adamw"};
const Keys kScheduleNames = {"constant", "multistep", "cosine"};
const Keys kLrScalingNames = {"none", "linear"};
const Keys kBackendNames = {"auto", "mpi", "nccl"};
const Keys kDebugNames = {"none", "collectives"};
const Keys kPrecisionNames = {"fp32", "bf16"};
const Keys kNonfiniteActions = {"stop", "skip"};
const Keys kDeviceNames = {"auto", "cpu", "cuda"};

std::string join(const Keys& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

bool contains(const Keys& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::string child_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
    case YAML::NodeType::Map: {
      // Short ones in full ("[3, 2]"), long ones by kind.
      YAML::Emitter out;
      out << YAML::Flow << node;
      std::string text = out.c_str();
      if (text.size() <= 60 && text.find('\n') == std::string::npos) return text;
      return node.IsSequence() ? "a list" : "a mapping";
    }
    default:
      return "nothing (null)";
  }
}

std::string format_double(double v) {
  char text[32];
  auto result = std::to_chars(text, text + sizeof text, v);
  std::string s(text, result.ptr);
  // Keep it a float to every YAML reader, YAML 1.1 ones (PyYAML) included, which want a
  // dot: "1" -> "1.0", "5e-04" -> "5.0e-04".
  if (s.find('.') == std::string::npos) {
    size_t e = s.find('e');
    s.insert(e == std::string::npos ? s.size() : e, ".0");
  }
  return s;
}

// An integer >= min written in full ("3", not "3.0" or "3 epochs").
bool parse_int(const YAML::Node& node, int64_t min, int64_t& value) {
  if (!node.IsScalar()) return false;
  const std::string& text = node.Scalar();
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() && value >= min;
}

struct Override {
  std::string key;
  std::string text;  // the whole "key=value", for messages
};

// Knows where a node came from and phrases every error.
class Reader {
 public:
  Reader(std::string source, std::vector<Override> overrides)
      : source_(std::move(source)), overrides_(std::move(overrides)) {}

  // "file:line" for a node from the file; "--set k=v" for one an override put there.
  std::string where(const YAML::Node& node, const std::string& path) const {
    for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
      if (path == it->key || path.rfind(it->key + ".", 0) == 0) return "--set " + it->text;
    }
    if (node.IsDefined() && !node.Mark().is_null())
      return source_ + ":" + std::to_string(node.Mark().line + 1);
    return source_;
  }

  [[noreturn]] void fail(const YAML::Node& node, const std::string& path, const std::string& message) const {
    DPT_FAIL() << where(node, path) << ": " << message;
  }
  [[noreturn]] void fail_value(const YAML::Node& node, const std::string& path,
                               const std::string& expected) const {
    fail(node, path, "key '" + path + "': expected " + expected + ", got " + describe(node));
  }

  // Checks `map` is a mapping whose keys are unique scalars from `known`.
  void check_keys(const YAML::Node& map, const std::string& path, const Keys& known) const {
    if (!map.IsMap()) fail_value(map, path, "a mapping of keys (" + join(known) + ")");
    std::map<std::string, int> seen;  // key -> line
    for (const auto& pair : map) {
      const YAML::Node& key = pair.first;
      if (!key.IsScalar()) {
        fail(key, path,
             (path.empty() ? "at the top level" : "in '" + path + "'") +
                 std::string(": keys must be plain names, got ") + describe(key));
      }
      const std::string name = key.Scalar();
      const std::string full = child_path(path, name);
      if (!contains(known, name)) {
        fail(key, full, "unknown key '" + full + "' (expected one of: " + join(known) + ")");
      }
      int line = key.Mark().line + 1;
      if (!seen.emplace(name, line).second) {
        fail(key, full,
             "duplicate key '" + full + "' (first given at line " + std::to_string(seen[name]) + ")");
      }
    }
  }

  // Checks every key of `map` applies to the chosen `name` (e.g. no momentum for adamw).
  void check_applicable(const YAML::Node& map, const std::string& path, const std::string& kind,
                        const std::string& name, const Keys& applicable) const {
    // When --set changed only the name, the fix is to replace the whole section.
    std::string hint;
    auto is_name = [&](const Override& o) { return o.key == path + ".name"; };
    if (std::any_of(overrides_.begin(), overrides_.end(), is_name)) {
      hint = "; to switch " + kind + " with --set, give the whole section: --set " + path +
             "={name: " + name + ", ...}";
    }
    for (const auto& pair : map) {
      const std::string key = pair.first.Scalar();
      if (!contains(applicable, key)) {
        const std::string full = child_path(path, key);
        fail(pair.first, full,
             "key '" + full + "' does not apply to " + kind + " '" + name +
                 "' (its keys: " + join(applicable) + ")" + hint);
      }
    }
  }

  int64_t get_int(const YAML::Node& node, const std::string& path, int64_t min,
                  const std::string& expected) const {
    int64_t value = 0;
    if (!parse_int(node, min, value)) fail_value(node, path, expected);
    return value;
  }

  uint64_t get_u64(const YAML::Node& node, const std::string& path) const {
    const std::string expected = "a non-negative integer";
    if (!node.IsScalar()) fail_value(node, path, expected);
    const std::string& text = node.Scalar();
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) fail_value(node, path, expected);
    return value;
  }

  // A finite number in [low, high], or [low, high) when high_open.
  double get_double(const YAML::Node& node, const std::string& path, double low, double high, bool low_open,
                    bool high_open, const std::string& expected) const {
    if (!node.IsScalar()) fail_value(node, path, expected);
    const std::string& text = node.Scalar();
    char* end = nullptr;
    double value = std::strtod(text.c_str(), &end);
    bool ok = !text.empty() && end == text.c_str() + text.size() && std::isfinite(value);
    ok = ok && (low_open ? value > low : value >= low) && (high_open ? value < high : value <= high);
    if (!ok) fail_value(node, path, expected);
    return value;
  }

  bool get_bool(const YAML::Node& node, const std::string& path) const {
    bool value = false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value))
      fail_value(node, path, "true or false");
    return value;
  }

  std::string get_string(const YAML::Node& node, const std::string& path) const {
    if (!node.IsScalar() || node.Scalar().empty()) fail_value(node, path, "a non-empty string");
    return node.Scalar();
  }

  std::string get_choice(const YAML::Node& node, const std::string& path, const std::string& kind,
                         const Keys& choices) const {
    std::string value = get_string(node, path);
    if (!contains(choices, value)) {
      fail(node, path,
           "key '" + path + "': unknown " + kind + " '" + value + "' (expected one of: " + join(choices) +
               ")");
    }
    return value;
  }

  std::vector<int64_t> get_int_list(const YAML::Node& node, const std::string& path, int64_t min,
                                    const std::string& expected) const {
    if (!node.IsSequence()) fail_value(node, path, expected);
    std::vector<int64_t> values;
    for (size_t i = 0; i < node.size(); ++i) {
      int64_t value = 0;
      if (!parse_int(node[i], min, value)) fail_value(node, path, expected);  // the whole list, for context
      values.push_back(value);
    }
    return values;
  }

 private:
  std::string source_;
  std::vector<Override> overrides_;
};

// Splits "a.b=v", checks the key path against the schema and sets it in `root`.
Override override_apply(YAML::Node& root, const std::string& text) {
  const size_t eq = text.find('=');
  DPT_CHECK(eq != std::string::npos && eq > 0)
      << "--set " << text << ": expected key=value, e.g. --set optimizer.lr=0.1";
  Override o{text.substr(0, eq), text};
  const std::string value_text = text.substr(eq + 1);
  std::vector<std::string> parts;
  std::stringstream stream(o.key);
  for (std::string part; std::getline(stream, part, '.');) parts.push_back(part);
  bool empty_part =
      o.key.back() == '.' || std::any_of(parts.begin(), parts.end(), [](auto& p) { return p.empty(); });
  DPT_CHECK(!empty_part) << "--set " << text << ": malformed key '" << o.key
                         << "', expected names joined by '.'";

  // The same rule as for the file: only `model` may hold keys the schema does not know.
  DPT_CHECK(contains(kTopKeys, parts[0]))
      << "--set " << text << ": unknown key '" << o.key << "' (expected one of: " << join(kTopKeys) << ")";
  auto section = kSectionKeys.find(parts[0]);
  if (parts[0] != "model" && parts.size() > 1) {
    DPT_CHECK(section != kSectionKeys.end()) << "--set " << text << ": unknown key '" << o.key << "' ('"
                                             << parts[0] << "' holds a value, not keys)";
    DPT_CHECK(parts.size() == 2 && contains(section->second, parts[1]))
        << "--set " << text << ": unknown key '" << o.key << "' (expected one of: " << join(section->second)
        << ")";
  }

  YAML::Node value;
  try {
    value = YAML::Load(value_text);
  } catch (const YAML::Exception& e) {
    DPT_FAIL() << "--set " << text << ": malformed YAML value: " << e.msg;
  }

  if (!root.IsDefined() || root.IsNull()) root.reset(YAML::Node(YAML::NodeType::Map));
  DPT_CHECK(root.IsMap()) << "--set " << text << ": the config file's top level is not a mapping";
  // yaml-cpp's Node assignment writes through to the referenced node, so walking uses
  // reset() to move the handle instead.
  YAML::Node node;
  node.reset(root);
  std::string path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    path = child_path(path, parts[i]);
    YAML::Node next = node[parts[i]];
    if (!next.IsDefined() || next.IsNull()) {
      node[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next.reset(node[parts[i]]);
    }
    DPT_CHECK(next.IsMap()) << "--set " << text << ": cannot set a key inside '" << path
                            << "', which the config gives as " << describe(next) << ", not a mapping";
    node.reset(next);
  }
  node[parts.back()] = value;
  return o;
}

DatasetConfig parse_dataset(const Reader& r, const YAML::Node& given) {
  DatasetConfig d;
  YAML::Node map = given ? given : YAML::Node(YAML::NodeType::Map);
  r.check_keys(map, "dataset", kSectionKeys.at("dataset"));
  if (map["name"]) d.name = r.get_choice(map["name"], "dataset.name", "dataset", kDatasetNames);
  r.check_applicable(map, "dataset", "dataset", d.name, kDatasetKeys.at(d.name));
  if (map["augment"]) d.augment = r.get_bool(map["augment"], "dataset.augment");
  if (d.name == "synthetic") {
    if (map["shape"]) {
      d.shape =
          r.get_int_list(map["shape"], "dataset.shape", 1, "3 positive integers [channels, height, width]");
      if (d.shape.size() != 3)
        r.fail_value(map["shape"], "dataset.shape", "3 positive integers [channels, height, width]");
    }
    if (map["classes"]) d.classes = r.get_int(map["classes"], "dataset.classes", 2, "an integer >= 2");
    if (map["size"]) d.size = r.get_int(map["size"], "dataset.size", 1, "a positive integer");
  } else if (d.name == "cifar10") {
    d.path = "data/cifar10/cifar-10-batches-bin";
    if (map["path"]) d.path = r.get_string(map["path"], "dataset.path");
    d.shape = {3, 32, 32};
    d.classes = 10;
  } else {
    d.path = d.name == "mnist" ? "data/mnist" : "/usr/share/datasets/fashion-mnist";
    if (map["path"]) d.path = r.get_string(map["path"], "dataset.path");
    d.shape = {1, 28, 28};
    d.classes = 10;
  }
  return d;
}

OptimizerConfig parse_optimizer(const Reader& r, const YAML::Node& given) {
  OptimizerConfig o;
  YAML::Node m = given ? given : YAML::Node(YAML::NodeType::Map);
  r.check_keys(m, "optimizer", kSectionKeys.at("optimizer"));
  if (m["name"]) o.name = r.get_choice(m["name"], "optimizer.name", "optimizer", kOptimizerNames);
  r.check_applicable(m, "optimizer", "optimizer", o.name, kOptimizerKeys.at(o.name));
  if (o.name == "adamw") {
    o.lr = 1e-3;
    o.weight_decay = 0.01;
  }
  if (m["lr"]) o.lr = r.get_double(m["lr"], "optimizer.lr", 0, INFINITY, true, false, "a number > 0");
  if (m["weight_decay"]) {
    o.weight_decay =
        r.get_double(m["weight_decay"], "optimizer.weight_decay", 0, INFINITY, false, false, "a number >= 0");
  }
  if (m["no_decay_bias_bn"])
    o.no_decay_bias_bn = r.get_bool(m["no_decay_bias_bn"], "optimizer.no_decay_bias_bn");
  if (m["momentum"]) {
    o.momentum = r.get_double(m["momentum"], "optimizer.momentum", 0, 1, false, true, "a number in [0, 1)");
  }
  if (m["nesterov"]) o.nesterov = r.get_bool(m["nesterov"], "optimizer.nesterov");
  if (o.name == "sgd" && o.nesterov && o.momentum == 0) {
    r.fail(m["nesterov"], "optimizer.nesterov",
           "key 'optimizer.nesterov': Nesterov momentum needs momentum > 0");
  }
  if (m["betas"]) {
    const YAML::Node& b = m["betas"];
    const std::string expected = "two numbers in [0, 1), e.g. [0.9, 0.999]";
    if (!b.IsSequence() || b.size() != 2) r.fail_value(b, "optimizer.betas", expected);
    for (size_t i = 0; i < 2; ++i)
      o.betas[i] = r.get_double(b[i], "optimizer.betas", 0, 1, false, true, expected);
  }
  if (m["eps"]) o.eps = r.get_double(m["eps"], "optimizer.eps", 0, INFINITY, true, false, "a number > 0");
  return o;
}

ScheduleConfig parse_schedule(const Reader& r, const YAML::Node& map, double lr) {
  ScheduleConfig s;
  if (!map) return s;
  r.check_keys(map, "schedule", kSectionKeys.at("schedule"));
  if (map["name"]) s.name = r.get_choice(map["name"], "schedule.name", "schedule", kScheduleNames);
  r.check_applicable(map, "schedule", "schedule", s.name, kScheduleKeys.at(s.name));
  if (map["warmup_epochs"]) {
    s.warmup_epochs = r.get_int(map["warmup_epochs"], "schedule.warmup_epochs", 0, "a non-negative integer");
  }
  if (map["milestones"]) {
    const std::string expected = "a list of positive, strictly increasing epochs, e.g. [30, 60]";
    s.milestones = r.get_int_list(map["milestones"], "schedule.milestones", 1, expected);
    if (!std::is_sorted(s.milestones.begin(), s.milestones.end(), std::less_equal<>())) {
      r.fail_value(map["milestones"], "schedule.milestones", expected);
    }
  }
  if (s.name == "multistep" && s.milestones.empty()) {
    r.fail(map, "schedule",
           "schedule 'multistep' needs key 'schedule.milestones' (a list of epochs, e.g. [30, 60])");
  }
  if (map["gamma"])
    s.gamma = r.get_double(map["gamma"], "schedule.gamma", 0, 1, true, false, "a number in (0, 1]");
  if (map["min_lr"]) {
    s.min_lr = r.get_double(map["min_lr"], "schedule.min_lr", 0, lr, false, false,
                            "a number in [0, optimizer.lr = " + format_double(lr) + "]");
  }
  return s;
}

Config parse_config(const Reader& r, const YAML::Node& root, const std::string& path) {
  Config c;
  c.source = path;
  if (!root.IsDefined() || root.IsNull())
    r.fail(root, "", "the config is empty; it needs at least model: {name: ...}");
  if (!root.IsMap()) r.fail(root, "", "expected a mapping of keys at the top level, got " + describe(root));
  r.check_keys(root, "", kTopKeys);

  const YAML::Node& model = root["model"];
  if (!model)
    r.fail(root, "model",
           "missing key 'model' (a mapping with the model's registry name, e.g. {name: mnist_cnn})");
  if (!model.IsMap()) r.fail_value(model, "model", "a mapping with at least 'name', e.g. {name: mnist_cnn}");
  if (!model["name"])
    r.fail(model, "model.name", "missing key 'model.name' (the model's registry name, e.g. mnist_cnn)");
  c.model.name = r.get_string(model["name"], "model.name");
  c.model.node = YAML::Clone(model);

  c.dataset = parse_dataset(r, root["dataset"]);
  const std::string positive = "a positive integer";
  const std::string non_negative = "a non-negative integer";
  if (root["epochs"]) c.epochs = r.get_int(root["epochs"], "epochs", 1, positive);
  if (root["batch_size"]) c.batch_size = r.get_int(root["batch_size"], "batch_size", 1, positive);
  if (root["eval_batch_size"])
    c.eval_batch_size = r.get_int(root["eval_batch_size"], "eval_batch_size", 1, positive);
  if (root["threads"]) {
    // OpenMP cannot start an absurd number of threads, and crashes trying.
    const std::string expected = "an integer in [0, 1024] (0 = this process's share of the cores)";
    c.threads = r.get_int(root["threads"], "threads", 0, expected);
    if (c.threads > 1024) r.fail_value(root["threads"], "threads", expected);
  }
  if (root["seed"]) c.seed = r.get_u64(root["seed"], "seed");
  if (root["label_smoothing"]) {
    c.label_smoothing =
        r.get_double(root["label_smoothing"], "label_smoothing", 0, 1, false, true, "a number in [0, 1)");
  }
  if (root["log_every"]) c.log_every = r.get_int(root["log_every"], "log_every", 1, positive);
  if (root["max_steps_per_epoch"]) {
    c.max_steps_per_epoch =
        r.get_int(root["max_steps_per_epoch"], "max_steps_per_epoch", 0, non_negative + " (0 = all)");
  }
  c.optimizer = parse_optimizer(r, root["optimizer"]);
  c.schedule = parse_schedule(r, root["schedule"], c.optimizer.lr);

  if (root["ema_decay"])
    c.ema_decay = r.get_double(root["ema_decay"], "ema_decay", 0, 1, false, true, "a number in [0, 1) (0 = off)");
  if (root["lr_scaling"]) c.lr_scaling = r.get_choice(root["lr_scaling"], "lr_scaling", "lr scaling", kLrScalingNames);
  if (const YAML::Node& d = root["distributed"]) {
    r.check_keys(d, "distributed", kSectionKeys.at("distributed"));
    if (d["bucket_cap_mb"])
      c.distributed.bucket_cap_mb = r.get_double(d["bucket_cap_mb"], "distributed.bucket_cap_mb", 0, 1e6, false,
                                                 false, "a number of MB >= 0 (0 = one bucket per parameter)");
    if (d["sync_bn"]) c.distributed.sync_bn = r.get_bool(d["sync_bn"], "distributed.sync_bn");
    if (d["find_unused_parameters"])
      c.distributed.find_unused_parameters =
          r.get_bool(d["find_unused_parameters"], "distributed.find_unused_parameters");
    if (d["backend"]) c.distributed.backend = r.get_choice(d["backend"], "distributed.backend", "backend", kBackendNames);
    if (d["timeout_s"])
      c.distributed.timeout_s = r.get_double(d["timeout_s"], "distributed.timeout_s", 0, 1e9, false, false,
                                             "a number of seconds in [0, 1e9] (0 = wait forever)");
  }
  if (root["debug"]) c.debug = r.get_choice(root["debug"], "debug", "debug mode", kDebugNames);
  if (root["device"]) c.device = r.get_choice(root["device"], "device", "device", kDeviceNames);

  if (root["precision"]) c.precision = r.get_choice(root["precision"], "precision", "precision", kPrecisionNames);
  if (root["channels_last"]) c.channels_last = r.get_bool(root["channels_last"], "channels_last");
  if (root["deterministic"]) c.deterministic = r.get_bool(root["deterministic"], "deterministic");
  if (root["on_nonfinite"])
    c.on_nonfinite = r.get_choice(root["on_nonfinite"], "on_nonfinite", "action", kNonfiniteActions);
  if (root["cuda_graphs"]) {
    c.cuda_graphs = r.get_bool(root["cuda_graphs"], "cuda_graphs");
    // A replayed graph applies its update whatever the gradients held; it cannot skip one.
    if (c.cuda_graphs && c.on_nonfinite == "skip")
      r.fail(root["cuda_graphs"], "cuda_graphs",
             "cuda_graphs: true needs on_nonfinite: stop (a captured step cannot skip its update), got "
             "on_nonfinite: skip");
  }
  if (const YAML::Node& k = root["checkpoint"]) {
    r.check_keys(k, "checkpoint", kSectionKeys.at("checkpoint"));
    if (k["every_epochs"])
      c.checkpoint.every_epochs =
          r.get_int(k["every_epochs"], "checkpoint.every_epochs", 0, "a non-negative integer (0 = only on a signal)");
    if (k["keep_last"])
      c.checkpoint.keep_last = r.get_int(k["keep_last"], "checkpoint.keep_last", 0, "a non-negative integer (0 = all)");
  }

  c.output.dir = "runs/" + std::filesystem::path(path).stem().string();
  if (const YAML::Node& output = root["output"]) {
    r.check_keys(output, "output", kSectionKeys.at("output"));
    if (output["dir"]) c.output.dir = r.get_string(output["dir"], "output.dir");
  }
  return c;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  DPT_CHECK(std::filesystem::exists(path, ec)) << "config file '" << path << "' not found";
  DPT_CHECK(std::filesystem::is_regular_file(path, ec))
      << "config file '" << path << "' is not a regular file";
  std::ifstream file(path);
  DPT_CHECK(file) << "config file '" << path << "' cannot be read";
  std::stringstream text;
  text << file.rdbuf();

  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    DPT_FAIL() << path << ":" << e.mark.line + 1 << ":" << e.mark.column + 1 << ": malformed YAML: " << e.msg;
  }
  std::vector<Override> applied;
  for (const auto& o : overrides) applied.push_back(override_apply(root, o));
  Reader reader(path, std::move(applied));
  try {
    return parse_config(reader, root, path);
  } catch (const YAML::Exception& e) {
    // Anything yaml-cpp throws past the checks above is still a bad config, not a crash.
    DPT_FAIL() << path << ": " << e.what();
  }
}

std::string config_to_yaml(const Config& c) {
  YAML::Emitter out;
  auto number = [&](const char* key, double v) {
    out << YAML::Key << key << YAML::Value << format_double(v);
  };
  out << YAML::BeginMap;
  out << YAML::Key << "model" << YAML::Value << c.model.node;

  out << YAML::Key << "dataset" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << c.dataset.name;
  if (c.dataset.name == "synthetic") {
    out << YAML::Key << "shape" << YAML::Value << YAML::Flow << c.dataset.shape;
    out << YAML::Key << "classes" << YAML::Value << c.dataset.classes;
    out << YAML::Key << "size" << YAML::Value << c.dataset.size;
  } else {
    out << YAML::Key << "path" << YAML::Value << c.dataset.path;
  }
  out << YAML::Key << "augment" << YAML::Value << c.dataset.augment;
  out << YAML::EndMap;

  out << YAML::Key << "epochs" << YAML::Value << c.epochs;
  out << YAML::Key << "batch_size" << YAML::Value << c.batch_size;
  out << YAML::Key << "eval_batch_size" << YAML::Value << c.eval_batch_size;
  out << YAML::Key << "threads" << YAML::Value << c.threads;
  out << YAML::Key << "seed" << YAML::Value << c.seed;
  number("label_smoothing", c.label_smoothing);
  out << YAML::Key << "log_every" << YAML::Value << c.log_every;
  out << YAML::Key << "max_steps_per_epoch" << YAML::Value << c.max_steps_per_epoch;

  const OptimizerConfig& o = c.optimizer;
  out << YAML::Key << "optimizer" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << o.name;
  number("lr", o.lr);
  if (o.name == "sgd") {
    number("momentum", o.momentum);
    out << YAML::Key << "nesterov" << YAML::Value << o.nesterov;
  } else {
    out << YAML::Key << "betas" << YAML::Value << YAML::Flow << YAML::BeginSeq << format_double(o.betas[0])
        << format_double(o.betas[1]) << YAML::EndSeq;
    number("eps", o.eps);
  }
  number("weight_decay", o.weight_decay);
  out << YAML::Key << "no_decay_bias_bn" << YAML::Value << o.no_decay_bias_bn;
  out << YAML::EndMap;

  const ScheduleConfig& s = c.schedule;
  out << YAML::Key << "schedule" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << s.name;
  out << YAML::Key << "warmup_epochs" << YAML::Value << s.warmup_epochs;
  if (s.name == "multistep") {
    out << YAML::Key << "milestones" << YAML::Value << YAML::Flow << s.milestones;
    number("gamma", s.gamma);
  }
  if (s.name == "cosine") number("min_lr", s.min_lr);
  out << YAML::EndMap;

  out << YAML::Key << "lr_scaling" << YAML::Value << c.lr_scaling;
  number("ema_decay", c.ema_decay);
  const DistributedConfig& d = c.distributed;
  out << YAML::Key << "distributed" << YAML::Value << YAML::BeginMap;
  number("bucket_cap_mb", d.bucket_cap_mb);
  out << YAML::Key << "sync_bn" << YAML::Value << d.sync_bn;
  out << YAML::Key << "find_unused_parameters" << YAML::Value << d.find_unused_parameters;
  out << YAML::Key << "backend" << YAML::Value << d.backend;
  number("timeout_s", d.timeout_s);
  out << YAML::EndMap;
  out << YAML::Key << "debug" << YAML::Value << c.debug;
  out << YAML::Key << "device" << YAML::Value << c.device;

  out << YAML::Key << "precision" << YAML::Value << c.precision;
  out << YAML::Key << "channels_last" << YAML::Value << c.channels_last;
  out << YAML::Key << "deterministic" << YAML::Value << c.deterministic;
  out << YAML::Key << "on_nonfinite" << YAML::Value << c.on_nonfinite;
  out << YAML::Key << "cuda_graphs" << YAML::Value << c.cuda_graphs;
  out << YAML::Key << "checkpoint" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "every_epochs" << YAML::Value << c.checkpoint.every_epochs;
  out << YAML::Key << "keep_last" << YAML::Value << c.checkpoint.keep_last;
  out << YAML::EndMap;

  out << YAML::Key << "output" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "dir" << YAML::Value << c.output.dir;
  out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace dpt::io
