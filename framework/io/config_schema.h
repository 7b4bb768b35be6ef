// The configuration schema: one row per key (config_keys) and the rules between keys
// (config_rules), both in io/config_schema.cpp. io/config.cpp reads, checks, writes and
// documents a Config through these rows and nothing else, so a key is described once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "io/config.h"

namespace dpt::io {

// A key whose value is one of an enum's names (kEnumNames): reads and writes the enum.
struct Choice {
  std::string noun;                       // "unknown <noun> 'x'": "optimizer", "debug mode"
  const std::vector<std::string>* names;  // kEnumNames<E>, by enum value
  std::function<size_t()> get;
  std::function<void(size_t)> set;
};

template <class E>
Choice choice(E* value, std::string noun) {
  return {std::move(noun), &kEnumNames<E>, [value] { return static_cast<size_t>(*value); },
          [value](size_t index) { *value = static_cast<E>(index); }};
}

// The member of the Config that holds a key's value; its type says how the value is read.
using Field = std::variant<int64_t*, uint64_t*, double*, bool*, std::string*, std::vector<int64_t>*,
                           std::vector<double>*, Choice>;

// One key. The constructor takes what every key has; the methods add what some keys have.
struct Key {
  // path: "optimizer.lr" (section.name) or "epochs" (top level).
  // default_value: YAML text, checked like a value from the file: "0.1", "[1, 28, 28]", "sgd";
  //   "" = required. "<config file stem>" in it is replaced by the config file's stem.
  // range: for integers, numbers and the elements of lists: "> 0", ">= 1", "[0, 1)",
  //   "(0, 1]", "[0, 1024]"; "" for other types. Messages and docs print it as written.
  // doc: one line for the docs table.
  Key(std::string path, Field field, std::string default_value, std::string range, std::string doc)
      : path(std::move(path)),
        field(std::move(field)),
        default_value(std::move(default_value)),
        range(std::move(range)),
        doc(std::move(doc)) {}

  // Applies only when its section's `name` is one of `names` (momentum: sgd).
  Key& only(std::vector<std::string> names) {
    applies_to = std::move(names);
    return *this;
  }
  // Another default when its section's `name` is `name` (lr: 0.001 for adamw).
  Key& default_if(std::string name, std::string value) {
    name_defaults.emplace_back(std::move(name), std::move(value));
    return *this;
  }
  // For messages and docs: "a number of seconds in [0, 1e9] (0 = wait forever)".
  Key& unit(std::string text) {
    number_unit = std::move(text);
    return *this;
  }
  Key& zero_means(std::string text) {
    zero_meaning = std::move(text);
    return *this;
  }
  // A list: exactly `length` values (0: one or more), each within `range`, strictly
  // increasing if asked; `expected` says so in messages and docs.
  Key& list(size_t length, std::string expected, bool increasing = false) {
    list_length = length;
    list_expected = std::move(expected);
    list_increasing = increasing;
    return *this;
  }

  std::string path;
  Field field;
  std::string default_value;
  std::string range;
  std::string doc;
  std::vector<std::string> applies_to;  // empty: every name
  std::vector<std::pair<std::string, std::string>> name_defaults;
  std::string number_unit, zero_meaning;
  size_t list_length = 0;
  bool list_increasing = false;
  std::string list_expected;
};

// Every key, in the order of the docs table and of config_to_yaml, each pointing into
// `config`. The keys of a section are consecutive; a section's `name` key comes first.
std::vector<Key> config_keys(Config& config);

// A rule between keys, checked once every key is read: `check` says what is wrong ("" if
// nothing), and the message is reported at `key`'s line.
struct Rule {
  std::string key;
  std::function<std::string(const Config&)> check;
};
std::vector<Rule> config_rules();

// A double as YAML writes it back and messages show it: shortest round-trip form with a
// dot ("0.1", "1.0", "5.0e-04").
std::string format_number(double value);

}  // namespace dpt::io
