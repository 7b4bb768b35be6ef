// A recursive-descent JSON parser over a string_view, one character class per function,
// and a writer that escapes what JSON requires. Input may come from a damaged or hostile
// file, so every read is bounds-checked and recursion stops at kMaxDepth.
#include "io/json_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "core/error.h"
#include "io/json.h"

namespace dpt::io {
namespace {

constexpr int kMaxDepth = 64;

const char* kind_name(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::null:
      return "null";
    case JsonValue::Kind::boolean:
      return "a boolean";
    case JsonValue::Kind::number:
      return "a number";
    case JsonValue::Kind::string:
      return "a string";
    case JsonValue::Kind::array:
      return "an array";
    case JsonValue::Kind::object:
      return "an object";
  }
  return "?";
}

void append_utf8(std::string& out, uint32_t code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xc0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xe0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  }
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  JsonValue document() {
    skip_space();
    JsonValue v = value(0);
    skip_space();
    if (pos_ != text_.size()) fail("expected the end of the text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    DPT_FAIL() << source_ << ": malformed JSON at byte " << pos_ << ": " << what;
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() {
    while (!at_end() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  void expect(char c) {
    if (peek() != c || at_end()) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  void literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("expected a value");
    pos_ += word.size();
  }

  JsonValue value(int depth) {
    if (depth >= kMaxDepth) fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (at_end()) fail("expected a value, found the end of the text");
    switch (peek()) {
      case '{':
        return object(depth);
      case '[':
        return array(depth);
      case '"':
        return JsonValue(string());
      case 't':
        literal("true");
        return JsonValue(true);
      case 'f':
        literal("false");
        return JsonValue(false);
      case 'n':
        literal("null");
        return JsonValue();
      default:
        return number();
    }
  }

  JsonValue object(int depth) {
    expect('{');
    JsonValue out = JsonValue::object();
    std::unordered_set<std::string> seen;
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return out;
    }
    while (true) {
      skip_space();
      if (peek() != '"') fail("expected a key in double quotes");
      size_t key_pos = pos_;
      std::string key = string();
      if (!seen.insert(key).second) {
        pos_ = key_pos;
        fail("duplicate key \"" + key + "\"");
      }
      skip_space();
      expect(':');
      skip_space();
      out.set(key, value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}' && !at_end()) {
        ++pos_;
        return out;
      }
      fail("expected ',' or '}' in an object");
    }
  }

  JsonValue array(int depth) {
    expect('[');
    JsonValue out = JsonValue::array();
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return out;
    }
    while (true) {
      skip_space();
      out.push(value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']' && !at_end()) {
        ++pos_;
        return out;
      }
      fail("expected ',' or ']' in an array");
    }
  }

  uint32_t hex4() {
    if (pos_ + 4 > text_.size()) fail("expected 4 hex digits after \\u");
    uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_++];
      code <<= 4;
      if (c >= '0' && c <= '9')
        code |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        code |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        code |= static_cast<uint32_t>(c - 'A' + 10);
      else
        fail("expected 4 hex digits after \\u");
    }
    return code;
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string (escape it)");
      ++pos_;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) fail("unterminated escape");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t code = hex4();
          if (code >= 0xdc00 && code <= 0xdfff) fail("a low surrogate \\u escape without a high one");
          if (code >= 0xd800 && code <= 0xdbff) {
            if (text_.substr(pos_, 2) != "\\u") fail("a high surrogate \\u escape without a low one");
            pos_ += 2;
            uint32_t low = hex4();
            if (low < 0xdc00 || low > 0xdfff) fail("a high surrogate \\u escape without a low one");
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          }
          append_utf8(out, code);
          break;
        }
        default:
          --pos_;
          fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  JsonValue number() {
    const size_t start = pos_;
    auto digits = [&] {
      size_t from = pos_;
      while (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ > from;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0' && !at_end()) {
      ++pos_;
    } else if (!digits()) {
      pos_ = start;
      fail("expected a value");
    }
    if (peek() == '.' && !at_end()) {
      ++pos_;
      if (!digits()) fail("expected digits after '.'");
    }
    if ((peek() == 'e' || peek() == 'E') && !at_end()) {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!digits()) fail("expected digits in the exponent");
    }
    return JsonValue::number_text(std::string(text_.substr(start, pos_ - start)));
  }

  std::string_view text_;
  const std::string& source_;
  size_t pos_ = 0;
};

}  // namespace

JsonValue::JsonValue(bool value) : kind_(Kind::boolean), bool_(value) {}
JsonValue::JsonValue(int64_t value) : kind_(Kind::number), text_(std::to_string(value)) {}
JsonValue::JsonValue(uint64_t value) : kind_(Kind::number), text_(std::to_string(value)) {}

JsonValue::JsonValue(double value) : kind_(Kind::number) {
  DPT_CHECK(std::isfinite(value)) << "JSON cannot hold the non-finite number " << value;
  char buf[32];
  auto result = std::to_chars(buf, buf + sizeof buf, value);  // shortest text that reads back exactly
  text_.assign(buf, result.ptr);
}

JsonValue::JsonValue(std::string value) : kind_(Kind::string), text_(std::move(value)) {}

JsonValue JsonValue::array(std::vector<JsonValue> items) {
  JsonValue v;
  v.kind_ = Kind::array;
  v.items_ = std::move(items);
  return v;
}

JsonValue JsonValue::object() {
  JsonValue v;
  v.kind_ = Kind::object;
  return v;
}

JsonValue JsonValue::number_text(std::string text) {
  JsonValue v;
  v.kind_ = Kind::number;
  v.text_ = std::move(text);
  return v;
}

JsonValue& JsonValue::set(const std::string& key, JsonValue value) {
  DPT_CHECK(kind_ == Kind::object) << "JsonValue::set on " << kind_name(kind_);
  for (auto& [k, v] : members_) {
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  }
  members_.emplace_back(key, std::move(value));
  return *this;
}

JsonValue& JsonValue::push(JsonValue value) {
  DPT_CHECK(kind_ == Kind::array) << "JsonValue::push on " << kind_name(kind_);
  items_.push_back(std::move(value));
  return *this;
}

const JsonValue* JsonValue::find(const std::string& key) const {
  if (kind_ != Kind::object) return nullptr;
  for (const auto& [k, v] : members_)
    if (k == key) return &v;
  return nullptr;
}

const JsonValue& JsonValue::at(const std::string& key, const std::string& where) const {
  as_object(where);
  const JsonValue* v = find(key);
  DPT_CHECK(v != nullptr) << where << ": missing key '" << key << "'";
  return *v;
}

bool JsonValue::as_bool(const std::string& where) const {
  DPT_CHECK(kind_ == Kind::boolean) << where << ": expected true or false, got " << describe();
  return bool_;
}

int64_t JsonValue::as_int(const std::string& where) const {
  int64_t value = 0;
  bool ok = kind_ == Kind::number;
  if (ok) {
    auto [end, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), value);
    ok = ec == std::errc() && end == text_.data() + text_.size();
  }
  DPT_CHECK(ok) << where << ": expected an integer, got " << describe();
  return value;
}

double JsonValue::as_double(const std::string& where) const {
  double value = 0;
  bool ok = kind_ == Kind::number;
  if (ok) {
    auto [end, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), value);
    ok = ec == std::errc() && end == text_.data() + text_.size();
  }
  DPT_CHECK(ok) << where << ": expected a finite number, got " << describe();
  return value;
}

const std::string& JsonValue::as_string(const std::string& where) const {
  DPT_CHECK(kind_ == Kind::string) << where << ": expected a string, got " << describe();
  return text_;
}

const std::vector<JsonValue>& JsonValue::as_array(const std::string& where) const {
  DPT_CHECK(kind_ == Kind::array) << where << ": expected an array, got " << describe();
  return items_;
}

const JsonValue::Members& JsonValue::as_object(const std::string& where) const {
  DPT_CHECK(kind_ == Kind::object) << where << ": expected an object, got " << describe();
  return members_;
}

std::string JsonValue::dump() const {
  std::string out;
  dump_to(out);
  return out;
}

void JsonValue::dump_to(std::string& out) const {
  switch (kind_) {
    case Kind::null:
      out += "null";
      break;
    case Kind::boolean:
      out += bool_ ? "true" : "false";
      break;
    case Kind::number:
      out += text_;
      break;
    case Kind::string:
      out += json_quote(text_);
      break;
    case Kind::array:
      out += '[';
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i > 0) out += ", ";
        items_[i].dump_to(out);
      }
      out += ']';
      break;
    case Kind::object:
      out += '{';
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i > 0) out += ", ";
        out += json_quote(members_[i].first);
        out += ": ";
        members_[i].second.dump_to(out);
      }
      out += '}';
      break;
  }
}

std::string JsonValue::describe() const {
  if (kind_ == Kind::array || kind_ == Kind::object) return kind_name(kind_);
  std::string text = dump();
  return text.size() <= 40 ? text : std::string(kind_name(kind_));
}

JsonValue json_parse(std::string_view text, const std::string& source) {
  return Parser(text, source).document();
}

}  // namespace dpt::io
