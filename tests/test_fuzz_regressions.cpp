// Replays the fuzz targets' inputs in the normal suite (and under -DDPT_SANITIZE=ON): the
// seed corpus tests/fuzz/corpus/TARGET and every input that once broke a reader,
// tests/fuzz/regressions/TARGET. Files named ok_* must be accepted; every other one must be
// rejected with a one-line dpt::Error, and nothing may crash.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/targets.h"

namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class FuzzInputs : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(FuzzInputs, AcceptedOrOneLineErrorNeverACrash) {
  const std::string target = GetParam();
  const dpt::fuzz::Target run = dpt::fuzz::target_named(target);
  ASSERT_NE(run, nullptr) << target;
  const char* source = std::getenv("DPT_SOURCE_DIR");
  const fs::path root = fs::path(source ? source : ".") / "tests" / "fuzz";
  int files = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    const fs::path dir = root / kind / target;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      SCOPED_TRACE(std::string(kind) + "/" + target + "/" + name);
      const std::vector<uint8_t> bytes = read_bytes(entry.path());
      const dpt::fuzz::Outcome outcome = run(bytes.data(), bytes.size());
      ++files;
      if (name.rfind("ok_", 0) == 0) {
        EXPECT_TRUE(outcome.accepted) << outcome.error;
      } else {
        EXPECT_FALSE(outcome.accepted);
        EXPECT_FALSE(outcome.error.empty());
        EXPECT_EQ(outcome.error.find('\n'), std::string::npos) << outcome.error;
      }
    }
  }
  EXPECT_GT(files, 0) << "no inputs under " << root << " for " << target << " (DPT_SOURCE_DIR)";
}

INSTANTIATE_TEST_SUITE_P(Fuzz, FuzzInputs, ::testing::Values("idx", "cifar10", "config", "safetensors", "checkpoint"));
