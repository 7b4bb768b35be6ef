// JSON values for the files dpt reads back: checkpoint metadata and safetensors headers.
// The parser is strict (RFC 8259, no trailing commas, no duplicate keys), bounds its
// nesting, and names the source and byte offset of any problem; the typed getters name
// the key that is missing or of the wrong kind. Numbers keep their text, so integers read
// back exactly as int64 and doubles written by dump() read back bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dpt::io {

class JsonValue {
 public:
  enum class Kind { null, boolean, number, string, array, object };
  using Members = std::vector<std::pair<std::string, JsonValue>>;

  JsonValue() = default;  // null
  JsonValue(bool value);
  JsonValue(int64_t value);
  JsonValue(int value) : JsonValue(static_cast<int64_t>(value)) {}
  JsonValue(uint64_t value);
  // Requires a finite value (JSON has no NaN or infinity); written in the shortest form
  // that reads back to the same double.
  JsonValue(double value);
  JsonValue(std::string value);
  JsonValue(const char* value) : JsonValue(std::string(value)) {}
  static JsonValue array(std::vector<JsonValue> items = {});
  static JsonValue object();
  // A number from its JSON text, as the parser found it (not checked here).
  static JsonValue number_text(std::string text);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::null; }

  // Building: set() on an object replaces an existing key or appends; push() on an array.
  JsonValue& set(const std::string& key, JsonValue value);
  JsonValue& push(JsonValue value);

  // Reading. `where` names the value in messages, e.g. "step-8.json: key 'sampler.epoch'".
  // Each throws dpt::Error "<where>: expected <kind>, got <what was there>".
  const JsonValue* find(const std::string& key) const;  // nullptr if absent or not an object
  const JsonValue& at(const std::string& key, const std::string& where) const;  // "missing key" if absent
  bool as_bool(const std::string& where) const;
  int64_t as_int(const std::string& where) const;  // an integer literal within int64
  double as_double(const std::string& where) const;
  const std::string& as_string(const std::string& where) const;
  const std::vector<JsonValue>& as_array(const std::string& where) const;
  const Members& as_object(const std::string& where) const;

  // Compact JSON text; keys in insertion order.
  std::string dump() const;
  // A short description for messages: the text itself when short, else the kind.
  std::string describe() const;

 private:
  void dump_to(std::string& out) const;

  Kind kind_ = Kind::null;
  bool bool_ = false;
  std::string text_;  // a string's value, or a number's literal
  std::vector<JsonValue> items_;
  Members members_;
};

// Parses one JSON value (surrounded by optional whitespace) from `text`. Throws dpt::Error
// "<source>: malformed JSON at byte N: <what was expected>" on any syntax error, a
// duplicate key, invalid UTF-8 escapes, or nesting deeper than 64 levels.
JsonValue json_parse(std::string_view text, const std::string& source);

}  // namespace dpt::io
