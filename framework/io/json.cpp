// nlohmann::json reads and writes. Duplicate keys and deep nesting are refused through its
// parse callback, which is not told where it is: the text is read through a buffer that
// counts, for the byte those two errors name.
#include "io/json.h"

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <istream>
#include <limits>
#include <set>
#include <streambuf>
#include <vector>

#include "core/error.h"

namespace dpt::io {
namespace {

// nlohmann's parser keeps its own stack, but copying, comparing and writing a value
// recurse: the bound keeps a hostile file from overflowing the stack there.
constexpr int kMaxDepth = 64;

// The text as a stream that says how many bytes the parser has taken so far.
class TextBuffer : public std::streambuf {
 public:
  explicit TextBuffer(std::string_view text) {
    char* begin = const_cast<char*>(text.data());  // only ever read
    setg(begin, begin, begin + text.size());
  }
  size_t read() const { return static_cast<size_t>(gptr() - eback()); }
};

std::string one_line(const JsonIn& value) {
  return value.dump(-1, ' ', false, JsonIn::error_handler_t::replace);
}

// A short description for messages: the value's text when short, else its kind.
std::string json_describe(const JsonIn& value) {
  std::string text = one_line(value);
  if (!value.is_structured() && text.size() <= 40) return text;
  return (value.is_array() || value.is_object() ? "an " : "a ") + std::string(value.type_name());
}

// Cut in the middle when a long token or key would make a damaged file's one-line message
// thousands of bytes long.
std::string shortened(std::string reason) {
  constexpr size_t kKeep = 80;
  if (reason.size() > 2 * kKeep + 5)
    reason = reason.substr(0, kKeep) + " ... " + reason.substr(reason.size() - kKeep);
  return reason;
}

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 1,
// column 9: " prefix: the byte offset says where.
std::string library_reason(const std::string& what) {
  std::string reason = what;
  if (size_t id_end = reason.find("] ");
      reason.rfind("[json.exception.", 0) == 0 && id_end != std::string::npos)
    reason.erase(0, id_end + 2);
  if (reason.rfind("parse error", 0) == 0)
    if (size_t colon = reason.find(": "); colon != std::string::npos) reason.erase(0, colon + 2);
  return shortened(reason);
}

}  // namespace

std::string json_text(const JsonOut& value, int indent) {
  return value.dump(indent, ' ', false, JsonOut::error_handler_t::replace);
}

JsonOut json_rounded(JsonOut value) {
  if (value.is_number_float()) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", value.get<double>());
    return std::strtod(text, nullptr);
  }
  if (value.is_structured())
    for (JsonOut& item : value) item = json_rounded(std::move(item));
  return value;
}

JsonIn json_parse(std::string_view text, const std::string& source) {
  TextBuffer buffer(text);
  std::istream stream(&buffer);
  auto fail = [&](size_t offset, const std::string& why) {
    DPT_FAIL() << source << ": malformed JSON at byte " << offset << ": " << why;
  };
  std::vector<std::set<std::string>> keys;  // those of each object being read, outermost first
  auto check = [&](int depth, JsonIn::parse_event_t event, JsonIn& parsed) {
    switch (event) {
      case JsonIn::parse_event_t::object_start:
        keys.emplace_back();
        [[fallthrough]];
      case JsonIn::parse_event_t::array_start:
        if (depth >= kMaxDepth)
          fail(buffer.read() - 1, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
        break;
      case JsonIn::parse_event_t::key:
        if (!keys.back().insert(parsed.get_ref<const std::string&>()).second)
          fail(buffer.read() - 1, shortened("duplicate key " + one_line(parsed)));
        break;
      case JsonIn::parse_event_t::object_end:
        keys.pop_back();
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return JsonIn::parse(stream, check);
  } catch (const JsonIn::parse_error& e) {
    fail(e.byte > 0 ? e.byte - 1 : 0, library_reason(e.what()));
  } catch (const JsonIn::exception& e) {  // a number beyond double's range
    fail(buffer.read() > 0 ? buffer.read() - 1 : 0, library_reason(e.what()));
  }
  return {};  // not reached: fail() throws
}

const JsonIn& json_at(const JsonIn& object, const std::string& key, const std::string& where) {
  const JsonIn* value = &object;
  for (size_t begin = 0, dot = 0; dot != std::string::npos; begin = dot + 1) {
    dot = key.find('.', begin);
    const std::string outer = key.substr(0, begin > 0 ? begin - 1 : 0);  // "" at the top
    const JsonIn::object_t& members =
        json_object(*value, outer.empty() ? where : where + ": key '" + outer + "'");
    auto it = members.find(key.substr(begin, dot - begin));
    DPT_CHECK(it != members.end()) << where << ": missing key '" << key.substr(0, dot) << "'";
    value = &it->second;
  }
  return *value;
}

int64_t json_int(const JsonIn& value, const std::string& where) {
  // nlohmann holds an integer literal as int64 or uint64, and anything else (2.5, 1e3, an
  // integer beyond uint64) as a double: only the first two are integers, never rounded.
  const bool in_range = value.is_number_integer() &&
                        (!value.is_number_unsigned() ||
                         value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  DPT_CHECK(in_range) << where << ": expected an integer, got " << json_describe(value);
  return value.get<int64_t>();
}

double json_number(const JsonIn& value, const std::string& where) {
  DPT_CHECK(value.is_number()) << where << ": expected a number, got " << json_describe(value);
  return value.get<double>();
}

bool json_bool(const JsonIn& value, const std::string& where) {
  DPT_CHECK(value.is_boolean()) << where << ": expected true or false, got " << json_describe(value);
  return value.get<bool>();
}

const std::string& json_string(const JsonIn& value, const std::string& where) {
  DPT_CHECK(value.is_string()) << where << ": expected a string, got " << json_describe(value);
  return value.get_ref<const std::string&>();
}

const JsonIn::array_t& json_array(const JsonIn& value, const std::string& where) {
  DPT_CHECK(value.is_array()) << where << ": expected an array, got " << json_describe(value);
  return value.get_ref<const JsonIn::array_t&>();
}

const JsonIn::object_t& json_object(const JsonIn& value, const std::string& where) {
  DPT_CHECK(value.is_object()) << where << ": expected an object, got " << json_describe(value);
  return value.get_ref<const JsonIn::object_t&>();
}

}  // namespace dpt::io
