// Saving walks the training objects into three files; loading reads and checks all of the
// JSON and both tensor files before it changes anything it can avoid changing, so a bad
// checkpoint ends with one line naming what is wrong, never with half-loaded weights
// training on.
#include "io/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/layers.h"

namespace dpt::io {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "dpt checkpoint";
constexpr int64_t kVersion = 1;

std::string stem(int64_t step) { return "step-" + std::to_string(step); }

std::vector<nn::Dropout*> dropouts(nn::Module& model) {
  std::vector<nn::Dropout*> out;
  for (nn::Module* m : model.modules())
    if (auto* d = dynamic_cast<nn::Dropout*>(m)) out.push_back(d);
  return out;
}

// The optimizer's state (whole, Optimizer::state_for_save / state_for_load) and the EMA's
// tensors under their checkpoint names.
nn::NamedTensors state_tensors(const TrainingObjects& o,
                               const std::vector<optim::Optimizer::StateTensor>& state, bool with_ema) {
  std::map<const TensorImpl*, std::string> names;
  for (const auto& [name, p] : o.model.named_parameters()) names.emplace(p.impl(), name);
  nn::NamedTensors out;
  for (const auto& s : state) {
    auto it = names.find(s.param.impl());
    DPT_CHECK(it != names.end()) << "checkpoint: the optimizer holds a parameter of shape "
                                 << shape_str(s.param.shape()) << " that is not in the model";
    out.emplace_back(s.kind + "." + it->second, s.value);
  }
  if (with_ema)
    for (const auto& [name, t] : o.ema->shadow()) out.emplace_back("ema." + name, t);
  return out;
}

// Reads dotted keys ("position.step") from the checkpoint JSON with messages naming the file.
struct Fields {
  const JsonIn& root;
  const std::string& file;
  const JsonIn& get(const std::string& key) const { return json_at(root, key, file); }
  std::string where(const std::string& key) const { return file + ": key '" + key + "'"; }
  int64_t integer(const std::string& key, int64_t min) const {
    int64_t v = json_int(get(key), where(key));
    DPT_CHECK(v >= min) << where(key) << ": expected an integer >= " << min << ", got " << v;
    return v;
  }
  double number(const std::string& key) const { return json_number(get(key), where(key)); }
  const std::string& string(const std::string& key) const { return json_string(get(key), where(key)); }
  // A file named in the JSON: a bare name beside the JSON, never a path elsewhere.
  const std::string& file_name(const std::string& key) const {
    const std::string& name = string(key);
    DPT_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..")
        << where(key) << ": expected a file name beside the JSON, got '" << name << "'";
    return name;
  }
};

struct StepFile {
  int64_t step;
  bool json;  // step-S.json (not a tensor file or a temporary)
};

// Recognises step-S.json, step-S.safetensors, step-S.optimizer.safetensors and their .tmp.
bool parse_step_file(const std::string& name, StepFile& out) {
  static const std::regex pattern(R"(step-(\d{1,18})\.(json|safetensors|optimizer\.safetensors)(\.tmp)?)");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return false;
  out.step = std::stoll(m[1].str());
  out.json = m[2].str() == "json" && !m[3].matched;
  return true;
}

// Keeps checkpoint `newest` (just written) and the keep_last - 1 before it: checkpoint_save's pruning.
void prune(const std::string& dir, int64_t newest, int64_t keep_last) {
  std::set<int64_t> kept;
  for (int64_t step : checkpoint_steps(dir))
    if (step <= newest) kept.insert(step);
  if (keep_last > 0)
    while (static_cast<int64_t>(kept.size()) > keep_last) kept.erase(kept.begin());
  // JSONs first: a checkpoint stops existing before its tensors go.
  std::vector<std::string> jsons, others;
  for (const auto& entry : fs::directory_iterator(dir)) {
    StepFile f;
    if (!parse_step_file(entry.path().filename().string(), f) || kept.count(f.step)) continue;
    (f.json ? jsons : others).push_back(entry.path().string());
  }
  for (const auto& p : jsons) remove_file(p);
  for (const auto& p : others) remove_file(p);
}

// Everything but the tensors. Keys are grouped as checkpoint_load reads them.
JsonOut checkpoint_json(const TrainingObjects& objects, const CheckpointInfo& info,
                        const std::string& model_file, const std::string& state_file) {
  const TrainingProgress& p = info.progress;
  JsonOut rng = JsonOut::array();
  for (nn::Dropout* d : dropouts(objects.model)) rng.push_back(d->rng().state());
  JsonOut root;
  root["format"] = kFormat;
  root["version"] = kVersion;
  root["position"] = {{"step", p.step},
                      {"epoch", p.epoch},
                      {"step_in_epoch", p.step_in_epoch},
                      {"samples_in_epoch", p.samples_in_epoch},
                      {"epoch_loss_sum", p.epoch_loss_sum},
                      {"epoch_steps_applied", p.epoch_steps_applied}};
  root["world_size"] = info.world_size;
  root["batch_size"] = info.batch_size;
  root["threads"] = info.threads;
  root["deterministic"] = info.deterministic;
  root["model"] = {{"name", objects.model_name}, {"file", model_file}};
  root["optimizer"] = {
      {"name", objects.optimizer_name}, {"file", state_file}, {"steps", objects.optimizer.step_count()}};
  root["schedule"] = {{"lr", static_cast<double>(info.lr)}};
  root["ema"] = objects.ema ? JsonOut{{"updates", objects.ema->updates()}} : JsonOut();
  root["rng"] = {{"dropout", std::move(rng)}};
  root["metrics"] = {{"skipped_steps", p.skipped_steps},
                     {"train_images", p.train_images},
                     {"train_time_s", p.train_time_s},
                     {"best_test_acc", p.best_test_acc},
                     {"final_test_acc", p.final_test_acc}};
  root["config"] = info.config_yaml;
  return root;
}

}  // namespace

std::string checkpoint_save(const std::string& dir, const TrainingObjects& objects,
                            const std::vector<optim::Optimizer::StateTensor>& optimizer_state,
                            const CheckpointInfo& info, int64_t keep_last) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  DPT_CHECK(!ec) << dir << ": cannot create the checkpoint directory: " << ec.message();
  const TrainingProgress& p = info.progress;
  const std::string name = stem(p.step);
  const std::string model_file = name + ".safetensors", state_file = name + ".optimizer.safetensors";
  const std::string json_path = dir + "/" + name + ".json";
  const Metadata metadata = {{"format", "pt"}, {"producer", "dpt"}, {"step", std::to_string(p.step)}};
  // An older checkpoint of the same step (a run resumed from before it) stops existing
  // first, so its JSON never names half-replaced tensor files.
  remove_file(json_path);
  try {
    safetensors_write(dir + "/" + model_file, objects.model.state_dict(), metadata);
    safetensors_write(dir + "/" + state_file, state_tensors(objects, optimizer_state, objects.ema != nullptr),
                      metadata);

    const std::string text = json_text(checkpoint_json(objects, info, model_file, state_file), 2) + "\n";
    write_file_atomic(json_path, {text});
  } catch (const Error& e) {
    // Free what this checkpoint took; without its JSON it would never be used.
    ::unlink(json_path.c_str());
    ::unlink((dir + "/" + model_file).c_str());
    ::unlink((dir + "/" + state_file).c_str());
    const std::string last = checkpoint_resolve("auto", dir);
    DPT_FAIL() << "checkpoint " << name << " not saved: " << e.what() << "; "
               << (last.empty() ? "no earlier checkpoint exists" : "the last complete checkpoint is " + last);
  }
  prune(dir, p.step, keep_last);
  return json_path;
}

std::vector<int64_t> checkpoint_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return steps;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    StepFile f;
    if (parse_step_file(entry.path().filename().string(), f) && f.json) steps.push_back(f.step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string checkpoint_resolve(const std::string& arg, const std::string& dir) {
  const std::string accepted =
      "expected auto, a checkpoints directory, or a step-<S>.json / step-<S>.safetensors checkpoint file";
  std::error_code ec;
  if (arg == "auto" || fs::is_directory(arg, ec)) {
    const std::string where = arg == "auto" ? dir : arg;
    std::vector<int64_t> steps = checkpoint_steps(where);
    if (steps.empty()) {
      DPT_CHECK(arg == "auto") << "--resume " << arg << ": no checkpoint (step-<S>.json) in this directory";
      return "";
    }
    return (fs::path(where) / (stem(steps.back()) + ".json")).string();
  }
  StepFile f;
  const fs::path path(arg);
  DPT_CHECK(parse_step_file(path.filename().string(), f) && path.extension() != ".tmp")
      << "--resume " << arg << ": " << accepted;
  const fs::path json = path.parent_path() / (stem(f.step) + ".json");
  DPT_CHECK(fs::exists(json, ec)) << "--resume " << arg << ": " << json.string()
                                  << " does not exist (an incomplete or removed checkpoint)";
  return json.string();
}

CheckpointRecord checkpoint_parse_json(std::string_view text, const std::string& name) {
  const JsonIn root = json_parse(text, name);
  const Fields f{root, name};
  DPT_CHECK(f.string("format") == kFormat)
      << f.where("format") << ": expected \"" << kFormat << "\", got \"" << f.string("format") << "\"";
  DPT_CHECK(f.integer("version", 0) == kVersion)
      << f.where("version") << ": this dpt reads version " << kVersion << ", the file is version "
      << f.integer("version", 0);

  CheckpointRecord r;
  CheckpointInfo& info = r.info;
  TrainingProgress& p = info.progress;
  p.step = f.integer("position.step", 0);
  p.epoch = f.integer("position.epoch", 0);
  p.step_in_epoch = f.integer("position.step_in_epoch", 0);
  p.samples_in_epoch = f.integer("position.samples_in_epoch", 0);
  p.epoch_loss_sum = f.number("position.epoch_loss_sum");
  p.epoch_steps_applied = f.integer("position.epoch_steps_applied", 0);
  info.world_size = static_cast<int>(f.integer("world_size", 1));
  info.batch_size = f.integer("batch_size", 1);
  info.threads = static_cast<int>(f.integer("threads", 0));
  info.deterministic = json_bool(f.get("deterministic"), f.where("deterministic"));
  info.lr = static_cast<float>(f.number("schedule.lr"));
  p.skipped_steps = f.integer("metrics.skipped_steps", 0);
  p.train_images = f.integer("metrics.train_images", 0);
  p.train_time_s = f.number("metrics.train_time_s");
  p.best_test_acc = f.number("metrics.best_test_acc");
  p.final_test_acc = f.number("metrics.final_test_acc");
  info.config_yaml = f.string("config");

  r.model_name = f.string("model.name");
  r.model_file = f.file_name("model.file");
  r.optimizer_name = f.string("optimizer.name");
  r.optimizer_file = f.file_name("optimizer.file");
  r.optimizer_steps = f.integer("optimizer.steps", 0);
  r.has_ema = !f.get("ema").is_null();
  r.ema_updates = r.has_ema ? f.integer("ema.updates", 0) : 0;
  const auto& states = json_array(f.get("rng.dropout"), f.where("rng.dropout"));
  for (size_t i = 0; i < states.size(); ++i) {
    r.dropout_rng.push_back(json_string(states[i], f.where("rng.dropout")));
    try {
      Rng().set_state(r.dropout_rng.back());
    } catch (const Error& e) {
      DPT_FAIL() << f.where("rng.dropout") << " entry " << i << ": " << e.what();
    }
  }
  return r;
}

CheckpointRecord checkpoint_load(const std::string& json_path, const TrainingObjects& objects,
                                 const FileReader& read) {
  const CheckpointRecord r = checkpoint_parse_json(read(json_path), json_path);
  DPT_CHECK(r.model_name == objects.model_name)
      << json_path << ": a checkpoint of model '" << r.model_name << "', but the config's model is '"
      << objects.model_name << "'";
  DPT_CHECK(r.optimizer_name == objects.optimizer_name)
      << json_path << ": a checkpoint with " << r.optimizer_name
      << " optimizer state, but the config's optimizer is " << objects.optimizer_name;
  std::vector<nn::Dropout*> drops = dropouts(objects.model);
  DPT_CHECK(r.dropout_rng.size() == drops.size())
      << json_path << ": key 'rng.dropout': " << r.dropout_rng.size()
      << " dropout generator states, but the model has " << drops.size() << " dropout layers";

  const fs::path dir = fs::path(json_path).parent_path();
  SafetensorsFile model_file = safetensors_read((dir / r.model_file).string(), read);
  SafetensorsFile state_file = safetensors_read((dir / r.optimizer_file).string(), read);
  const bool load_ema = objects.ema && r.has_ema;
  const nn::NamedTensors model = objects.model.state_dict(),
                         state = state_tensors(objects, objects.optimizer.state_for_load(), load_ema);
  const std::string model_what = "the model '" + objects.model_name + "'";
  const std::string state_what =
      "the " + objects.optimizer_name + " optimizer" + (load_ema ? " and EMA" : "") + " state";
  auto ignore_ema = [&](const std::string& name) { return !objects.ema && name.rfind("ema.", 0) == 0; };
  safetensors_check_into(model_file, model, model_what);
  safetensors_check_into(state_file, state, state_what, ignore_ema);
  safetensors_load_into(model_file, model, model_what);
  safetensors_load_into(state_file, state, state_what, ignore_ema);
  objects.optimizer.state_loaded();
  objects.optimizer.set_step_count(r.optimizer_steps);
  for (size_t i = 0; i < drops.size(); ++i) drops[i]->rng().set_state(r.dropout_rng[i]);
  if (objects.ema) {
    if (load_ema) {
      objects.ema->set_updates(r.ema_updates);
    } else {  // no EMA state saved: start averaging from the loaded weights
      nn::NamedTensors state = objects.model.state_dict();
      for (size_t i = 0; i < state.size(); ++i) objects.ema->shadow()[i].second.copy_from(state[i].second);
      objects.ema->set_updates(0);
    }
  }
  return r;
}

void model_load_weights(const std::string& path, nn::Module& model, const std::string& model_name) {
  safetensors_load_into(safetensors_read(path), model.state_dict(), "the model '" + model_name + "'",
                        [](const std::string& name) { return name.ends_with(".num_batches_tracked"); });
}

void metrics_keep_epochs(const std::string& path, int64_t epochs) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  std::stringstream in(read_file(path));
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    try {
      if (json_int(json_at(json_parse(line, path), "epoch", path), path) <= epochs) kept += line + "\n";
    } catch (const Error&) {
      // A line cut short by a crash mid-append: dropped with the epochs after the checkpoint.
    }
  }
  write_file_atomic(path, {kept});
}

}  // namespace dpt::io
