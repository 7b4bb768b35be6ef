// YAML <-> Config, driven by the schema's rows (io/config_schema.h): a row says where a
// value goes, what it may be and what it defaults to, so nothing here names a key except
// the free-form `model`. A Reader turns every problem into one line that says where
// (file:line, or the --set that caused it), which key, what was expected and what was found.
#include "io/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/config_schema.h"

namespace dpt::io {

std::string format_number(double value) {
  char text[32];
  auto result = std::to_chars(text, text + sizeof text, value);
  std::string s(text, result.ptr);
  // Keep it a float to every YAML reader, YAML 1.1 ones (PyYAML) included, which want a
  // dot: "1" -> "1.0", "5e-04" -> "5.0e-04".
  if (s.find('.') == std::string::npos) {
    size_t e = s.find('e');
    s.insert(e == std::string::npos ? s.size() : e, ".0");
  }
  return s;
}

namespace {

using Names = std::vector<std::string>;

std::string join(const Names& names, const std::string& quote = "") {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + quote + n + quote;
  return out;
}

bool contains(const Names& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string child_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// "optimizer.lr" -> {"optimizer", "lr"}; "epochs" -> {"", "epochs"}.
std::pair<std::string, std::string> split_path(const std::string& path) {
  const size_t dot = path.find('.');
  if (dot == std::string::npos) return {"", path};
  return {path.substr(0, dot), path.substr(dot + 1)};
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

// --- what a row allows

// A row's range: "> 0", ">= 1", "[0, 1)", "(0, 1]", "[0, 1024]"; "" allows anything.
struct Range {
  double low = -INFINITY, high = INFINITY;
  bool low_open = false, high_open = false;
  bool holds(double v) const { return (low_open ? v > low : v >= low) && (high_open ? v < high : v <= high); }
};

Range range_of(const Key& key) {
  Range r;
  const char* text = key.range.c_str();
  char open = 0, close = 0;
  int end = -1;
  if (key.range.empty()) return r;
  if (std::sscanf(text, ">= %lf%n", &r.low, &end) == 1 && text[end] == '\0') return r;
  r.low_open = true;
  if (std::sscanf(text, "> %lf%n", &r.low, &end) == 1 && text[end] == '\0') return r;
  end = -1;
  std::sscanf(text, "%c%lf, %lf%c%n", &open, &r.low, &r.high, &close, &end);
  DPT_CHECK(end > 0 && text[end] == '\0' && (open == '[' || open == '(') && (close == ']' || close == ')'))
      << "config schema: key '" << key.path << "': range '" << key.range
      << "' is none of '> a', '>= a', '[a, b]', '[a, b)', '(a, b]'";
  r.low_open = open == '(';
  r.high_open = close == ')';
  return r;
}

// What a value of `key` must be, for messages and the docs: "a positive integer",
// "a number of seconds in [0, 1e9] (0 = wait forever)".
std::string expected_text(const Key& key) {
  std::string text;
  const bool integer =
      std::holds_alternative<int64_t*>(key.field) || std::holds_alternative<uint64_t*>(key.field);
  if (!key.list_expected.empty()) {
    text = key.list_expected;
  } else if (std::holds_alternative<bool*>(key.field)) {
    text = "true or false";
  } else if (std::holds_alternative<std::string*>(key.field)) {
    text = "a non-empty string";
  } else if (const Choice* choice = std::get_if<Choice>(&key.field)) {
    text = "one of " + join(*choice->names);
  } else if (integer && key.range == ">= 1") {
    text = "a positive integer";
  } else if (integer && key.range == ">= 0") {
    text = "a non-negative integer";
  } else {
    text = integer ? "an integer" : "a number";
    if (!key.number_unit.empty()) text += " of " + key.number_unit;
    if (!key.range.empty()) text += (key.range[0] == '>' ? " " : " in ") + key.range;
  }
  if (!key.zero_meaning.empty()) text += " (0 = " + key.zero_meaning + ")";
  return text;
}

// A scalar read as the field's type: an integer written in full ("3", not "3.0" or
// "3 epochs"), or a finite number; false when it is not one or is outside `range`.
template <class Integer>
bool parse_scalar(const YAML::Node& node, const Range& range, Integer& value) {
  if (!node.IsScalar()) return false;
  const std::string& text = node.Scalar();
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() && range.holds(static_cast<double>(value));
}

bool parse_scalar(const YAML::Node& node, const Range& range, double& value) {
  if (!node.IsScalar()) return false;
  const std::string& text = node.Scalar();
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size() && std::isfinite(value) && range.holds(value);
}

// --- the schema's rows as the YAML nests them

// Consecutive rows of one section ("" for the top level). A section's `name` key, when it
// is a choice, is its selector: the other keys may apply to some names only.
struct Section {
  std::string name;
  std::vector<const Key*> keys;

  // The names of its keys: all of them, or those that apply to `*chosen`.
  Names key_names(const std::string* chosen = nullptr) const {
    Names names;
    for (const Key* k : keys)
      if (!chosen || k->applies_to.empty() || contains(k->applies_to, *chosen))
        names.push_back(split_path(k->path).second);
    return names;
  }
  const Key* selector() const {
    const Key* first = keys.front();
    bool is_selector =
        !name.empty() && first->path == name + ".name" && std::holds_alternative<Choice>(first->field);
    return is_selector ? first : nullptr;
  }
  // The selector's current value ("adamw"), or "" without a selector.
  std::string chosen() const {
    const Key* s = selector();
    if (!s) return "";
    const Choice& c = std::get<Choice>(s->field);
    return c.names->at(c.get());
  }
};

std::vector<Section> sections_of(const std::vector<Key>& keys) {
  std::vector<Section> sections;
  for (const Key& key : keys) {
    const std::string section = split_path(key.path).first;
    if (sections.empty() || sections.back().name != section) {
      for (const Section& s : sections)
        DPT_CHECK(section.empty() || s.name != section) << "config schema: the keys of section '" << section
                                                        << "' are not consecutive (at " << key.path << ")";
      sections.push_back({section, {}});
    }
    sections.back().keys.push_back(&key);
  }
  return sections;
}

// The names the top level holds, in order: its own keys and the sections.
Names top_names(const std::vector<Section>& sections) {
  Names names;
  for (const Section& s : sections) {
    const Names own = s.name.empty() ? s.key_names() : Names{s.name};
    names.insert(names.end(), own.begin(), own.end());
  }
  return names;
}

// `model:` is the model builder's: any key beside `name` is allowed and kept.
bool is_open(const Section& s) { return s.name == "model"; }

// --- reading

struct Override {
  std::string key;
  std::string text;  // the whole "key=value", for messages
};

// Knows where a node came from and phrases every error.
class Reader {
 public:
  Reader(std::string source, std::vector<Override> overrides)
      : source_(std::move(source)), overrides_(std::move(overrides)) {}

  // "file:line" for a node from the file; "--set k=v" for one an override put there or in.
  std::string where(const YAML::Node& node, const std::string& path) const {
    for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
      if (path == it->key || path.rfind(it->key + ".", 0) == 0 || it->key.rfind(path + ".", 0) == 0)
        return "--set " + it->text;
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

  // Checks that the keys of mapping `map` are unique plain names from `known` that apply to
  // the section's `chosen` name (`applicable`: all of `known` without a selector).
  void check_keys(const YAML::Node& map, const std::string& path, const Names& known, const Names& applicable,
                  const std::string& chosen) const {
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
        fail(key, full, "unknown key '" + full + "' (expected one of: " + join(applicable) + ")");
      }
      if (!contains(applicable, name)) {
        fail(key, full,
             "key '" + full + "' does not apply to " + path + " '" + chosen +
                 "' (its keys: " + join(applicable) + ")" + switch_hint(path, chosen));
      }
      int line = key.Mark().line + 1;
      if (!seen.emplace(name, line).second) {
        fail(key, full,
             "duplicate key '" + full + "' (first given at line " + std::to_string(seen[name]) + ")");
      }
    }
  }

  // Reads `node` into the member `key` points to, or fails saying what was expected.
  void read(const Key& key, const YAML::Node& node) const {
    if (std::holds_alternative<Choice>(key.field)) return read_choice(key, node);
    const Range range = range_of(key);
    if (!std::visit([&](const auto& field) { return read_value(node, key, range, field); }, key.field))
      fail_value(node, key.path, expected_text(key));
  }

 private:
  // When --set changed only a section's name, the fix is to give the whole section.
  std::string switch_hint(const std::string& path, const std::string& chosen) const {
    auto is_name = [&](const Override& o) { return o.key == path + ".name"; };
    if (std::none_of(overrides_.begin(), overrides_.end(), is_name)) return "";
    return "; to switch " + path + " with --set, give the whole section: --set " + path +
           "={name: " + chosen + ", ...}";
  }

  template <class T>
  static bool read_value(const YAML::Node& node, const Key&, const Range& range, T* value) {
    return parse_scalar(node, range, *value);
  }
  static bool read_value(const YAML::Node& node, const Key&, const Range&, bool* value) {
    return node.IsScalar() && YAML::convert<bool>::decode(node, *value);
  }
  static bool read_value(const YAML::Node& node, const Key&, const Range&, std::string* value) {
    if (!node.IsScalar() || node.Scalar().empty()) return false;
    *value = node.Scalar();
    return true;
  }
  static bool read_value(const YAML::Node&, const Key&, const Range&, const Choice&) { return false; }
  template <class T>
  static bool read_value(const YAML::Node& node, const Key& key, const Range& range, std::vector<T>* values) {
    if (!node.IsSequence()) return false;
    values->assign(node.size(), T{});
    for (size_t i = 0; i < node.size(); ++i)
      if (!parse_scalar(node[i], range, (*values)[i])) return false;
    const bool length_ok = key.list_length > 0 ? values->size() == key.list_length : !values->empty();
    const bool order_ok = !key.list_increasing || std::adjacent_find(values->begin(), values->end(),
                                                                     std::greater_equal<>()) == values->end();
    return length_ok && order_ok;
  }

  void read_choice(const Key& key, const YAML::Node& node) const {
    const Choice& choice = std::get<Choice>(key.field);
    if (!node.IsScalar() || node.Scalar().empty()) fail_value(node, key.path, "a non-empty string");
    const Names& names = *choice.names;
    const auto it = std::find(names.begin(), names.end(), node.Scalar());
    if (it == names.end()) {
      fail(node, key.path,
           "key '" + key.path + "': unknown " + choice.noun + " '" + node.Scalar() +
               "' (expected one of: " + join(names) + ")");
    }
    choice.set(static_cast<size_t>(it - names.begin()));
  }

  std::string source_;
  std::vector<Override> overrides_;
};

// Splits "a.b=v", checks the key path against the schema and sets it in `root`.
Override override_apply(YAML::Node& root, const std::string& text, const std::vector<Section>& sections) {
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

  // Keys the schema does not know are reported when the file is read, against this --set.
  const bool in_value =
      parts.size() > 1 && contains(top_names(sections), parts[0]) &&
      std::none_of(sections.begin(), sections.end(), [&](auto& s) { return s.name == parts[0]; });
  DPT_CHECK(!in_value) << "--set " << text << ": unknown key '" << o.key << "' ('" << parts[0]
                       << "' holds a value, not keys)";

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

// The node the file (or an override) gave for `path`; undefined when there is none.
YAML::Node node_at(const YAML::Node& root, const std::string& path) {
  const auto [section, name] = split_path(path);
  const YAML::Node map = section.empty() ? root : root[section];
  return map.IsMap() ? map[name] : YAML::Node(YAML::NodeType::Undefined);
}

// The default of `key` for the section's chosen name, "" when it is required.
std::string default_of(const Key& key, const std::string& chosen) {
  for (const auto& [name, value] : key.name_defaults)
    if (name == chosen) return value;
  return key.default_value;
}

// Reads every key of section `s` that applies to its chosen name, from `root` or the
// default. Keys that do not apply are left value-initialised.
void read_section(const Reader& r, const YAML::Node& root, const Section& s, const std::string& stem) {
  const YAML::Node map = s.name.empty() ? root : root[s.name];
  if (map && !map.IsMap()) r.fail_value(map, s.name, "a mapping of keys (" + join(s.key_names()) + ")");
  // A default is checked like a value from the file; a bad one is the schema's fault.
  const Reader defaults("the default in io/config_schema.cpp", {});
  auto read_key = [&](const Key& key, const std::string& chosen) {
    const std::string name = split_path(key.path).second;
    if (map && map[name]) return r.read(key, map[name]);
    const std::string fallback = default_of(key, chosen);
    if (fallback.empty()) {
      const std::string missing = chosen.empty() ? "missing key '" + key.path + "'"
                                                 : s.name + " '" + chosen + "' needs key '" + key.path + "'";
      r.fail(map ? map : root, key.path, missing + " (" + expected_text(key) + ")");
    }
    YAML::Node node = YAML::Load(fallback);  // parsed before the stem goes in: any stem is a plain string
    const std::string placeholder = "<config file stem>";
    if (const size_t at = node.IsScalar() ? node.Scalar().find(placeholder) : std::string::npos;
        at != std::string::npos)
      node = YAML::Node(std::string(node.Scalar()).replace(at, placeholder.size(), stem));
    defaults.read(key, node);
  };

  const Key* selector = s.selector();
  if (selector) read_key(*selector, "");
  const std::string chosen = s.chosen();
  const Names applicable = s.key_names(&chosen);
  if (map && !s.name.empty() && !is_open(s)) r.check_keys(map, s.name, s.key_names(), applicable, chosen);
  for (const Key* key : s.keys) {
    if (key != selector && contains(applicable, split_path(key->path).second)) read_key(*key, chosen);
  }
}

void parse_config(const Reader& r, const YAML::Node& root, const std::vector<Section>& sections,
                  const std::string& path, Config& c) {
  c.source = path;
  if (!root.IsDefined() || root.IsNull())
    r.fail(root, "", "the config is empty; it needs at least model: {name: ...}");
  if (!root.IsMap()) r.fail(root, "", "expected a mapping of keys at the top level, got " + describe(root));
  const Names top = top_names(sections);
  r.check_keys(root, "", top, top, "");

  const YAML::Node& model = root["model"];
  if (!model)
    r.fail(root, "model",
           "missing key 'model' (a mapping with the model's registry name, e.g. {name: mnist_cnn})");
  if (!model.IsMap()) r.fail_value(model, "model", "a mapping with at least 'name', e.g. {name: mnist_cnn}");
  if (!model["name"])
    r.fail(model, "model.name", "missing key 'model.name' (the model's registry name, e.g. mnist_cnn)");
  c.model.node = YAML::Clone(model);

  const std::string stem = std::filesystem::path(path).stem().string();
  for (const Section& s : sections) read_section(r, root, s, stem);
  for (const Rule& rule : config_rules()) {
    const std::string problem = rule.check(c);
    if (!problem.empty()) r.fail(node_at(root, rule.key), rule.key, problem);
  }
}

// --- writing

template <class... F>
struct Overload : F... {
  using F::operator()...;
};

void write_value(YAML::Emitter& out, const Key& key) {
  out << YAML::Key << split_path(key.path).second << YAML::Value;
  std::visit(Overload{[&](double* p) { out << format_number(*p); },
                      [&](std::vector<int64_t>* p) { out << YAML::Flow << *p; },
                      [&](std::vector<double>* p) {
                        out << YAML::Flow << YAML::BeginSeq;
                        for (double v : *p) out << format_number(v);
                        out << YAML::EndSeq;
                      },
                      [&](const Choice& c) { out << c.names->at(c.get()); }, [&](auto* p) { out << *p; }},
             key.field);
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  DPT_CHECK(std::filesystem::exists(path, ec)) << "config file '" << path << "' not found";
  DPT_CHECK(std::filesystem::is_regular_file(path, ec))
      << "config file '" << path << "' is not a regular file";
  const std::string text = read_file(path);

  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    DPT_FAIL() << path << ":" << e.mark.line + 1 << ":" << e.mark.column + 1 << ": malformed YAML: " << e.msg;
  }
  Config config{};
  const std::vector<Key> keys = config_keys(config);
  const std::vector<Section> sections = sections_of(keys);
  std::vector<Override> applied;
  for (const auto& o : overrides) applied.push_back(override_apply(root, o, sections));
  Reader reader(path, std::move(applied));
  try {
    parse_config(reader, root, sections, path, config);
  } catch (const YAML::Exception& e) {
    // Anything yaml-cpp throws past the checks above is still a bad config, not a crash.
    DPT_FAIL() << path << ": " << e.what();
  }
  return config;
}

std::string config_to_yaml(const Config& config) {
  Config c = config;
  const std::vector<Key> keys = config_keys(c);
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const Section& s : sections_of(keys)) {
    if (is_open(s)) {
      out << YAML::Key << s.name << YAML::Value << c.model.node;
      continue;
    }
    if (!s.name.empty()) out << YAML::Key << s.name << YAML::Value << YAML::BeginMap;
    const std::string chosen = s.chosen();
    const Names applicable = s.key_names(&chosen);
    for (const Key* key : s.keys)
      if (contains(applicable, split_path(key->path).second)) write_value(out, *key);
    if (!s.name.empty()) out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string config_keys_markdown() {
  Config c{};
  std::string table =
      "| key | default | values | applies to | meaning |\n"
      "|---|---|---|---|---|\n";
  for (const Key& key : config_keys(c)) {
    std::string fallback = key.default_value.empty() ? "required" : "`" + key.default_value + "`";
    for (const auto& [name, value] : key.name_defaults) fallback += "; " + name + ": `" + value + "`";
    const Choice* choice = std::get_if<Choice>(&key.field);
    const std::string values = choice ? join(*choice->names, "`") : expected_text(key);
    table += "| `" + key.path + "` | " + fallback + " | " + values + " | " + join(key.applies_to, "`") +
             " | " + key.doc + " |\n";
  }
  return table;
}

}  // namespace dpt::io
