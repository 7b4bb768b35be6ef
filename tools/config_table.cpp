// config_table: the key table of docs/configuration.md, made from the config schema
// (framework/io/config_schema.cpp), so the docs cannot drift from what the parser accepts.
//
//   build/config_table                                 print the table
//   build/config_table docs/configuration.md           rewrite the table between its markers
//   build/config_table --check docs/configuration.md   exit 1 if the page's table is not current (a CTest
//   test)
#include <cstdio>
#include <string>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/config.h"

namespace {

const std::string kBegin =
    "<!-- config-keys: made by build/config_table from framework/io/config_schema.cpp -->";
const std::string kEnd = "<!-- /config-keys -->";

// `page` with the text between the marker lines replaced by the current table.
std::string page_with_table(const std::string& page, const std::string& path) {
  const size_t begin = page.find(kBegin + "\n");
  const size_t end = page.find(kEnd, begin == std::string::npos ? 0 : begin);
  DPT_CHECK(begin != std::string::npos && end != std::string::npos)
      << path << ": expected the marker lines '" << kBegin << "' and '" << kEnd << "' around the key table";
  const size_t after_begin = begin + kBegin.size() + 1;
  return page.substr(0, after_begin) + dpt::io::config_keys_markdown() + page.substr(end);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage = "usage: config_table [[--check] PAGE.md]";
  const bool check = argc == 3 && std::string(argv[1]) == "--check";
  if (argc == 1) {
    std::fputs(dpt::io::config_keys_markdown().c_str(), stdout);
    return 0;
  }
  if (argc > 3 || (argc == 3 && !check) || argv[argc - 1][0] == '-') {
    std::fprintf(stderr, "%s\n", usage.c_str());
    return 2;
  }
  const std::string path = argv[argc - 1];
  try {
    const std::string page = dpt::io::read_file(path);
    const std::string current = page_with_table(page, path);
    if (current == page) return 0;
    if (check) {
      std::fprintf(
          stderr,
          "%s: the config key table differs from framework/io/config_schema.cpp; run build/config_table "
          "%s\n",
          path.c_str(), path.c_str());
      return 1;
    }
    dpt::io::write_file_atomic(path, {current});
    std::printf("%s: key table rewritten\n", path.c_str());
  } catch (const dpt::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
