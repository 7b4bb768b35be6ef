// A flat JSON object writer for metrics.jsonl and summary.json: keys in insertion order,
// numbers printed so they read back exactly enough (up to 9 significant digits).
#pragma once

#include <cstdint>
#include <string>

namespace dpt::io {

class JsonObject {
 public:
  JsonObject& add(const std::string& key, double value);
  JsonObject& add(const std::string& key, int64_t value);
  JsonObject& add(const std::string& key, int value) { return add(key, static_cast<int64_t>(value)); }
  JsonObject& add(const std::string& key, const std::string& value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void add_raw(const std::string& key, const std::string& value);
  std::string body_;
};

std::string json_quote(const std::string& text);

// Appends one line to `path` (created if missing); throws Error naming the file on failure.
void append_line(const std::string& path, const std::string& line);
// Writes `text` to `path` through a temporary file and a rename, so readers never see half a file.
void write_file(const std::string& path, const std::string& text);

}  // namespace dpt::io
