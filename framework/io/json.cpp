#include "io/json.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/error.h"

namespace dpt::io {

std::string json_quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void JsonObject::add_raw(const std::string& key, const std::string& value) {
  if (!body_.empty()) body_ += ", ";
  body_ += json_quote(key) + ": " + value;
}

JsonObject& JsonObject::add(const std::string& key, double value) {
  if (!std::isfinite(value)) {
    add_raw(key, "null");  // JSON has no NaN or Infinity
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", value);
    add_raw(key, buf);
  }
  return *this;
}

JsonObject& JsonObject::add(const std::string& key, int64_t value) {
  add_raw(key, std::to_string(value));
  return *this;
}

JsonObject& JsonObject::add(const std::string& key, const std::string& value) {
  add_raw(key, json_quote(value));
  return *this;
}

void append_line(const std::string& path, const std::string& line) {
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
  DPT_CHECK(out.good()) << path << ": cannot append (disk full or no permission?)";
}

void write_file(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    DPT_CHECK(out.good()) << tmp << ": cannot write (disk full or no permission?)";
  }
  DPT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0) << path << ": cannot rename " << tmp << " into place";
}

}  // namespace dpt::io
