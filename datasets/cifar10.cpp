// CIFAR-10 reading: the files' sizes are checked first (a whole number of records, the
// expected count), then the records are read straight into the dataset's buffers.
#include "datasets/cifar10.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"

namespace dpt::data {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kClasses = 10;
constexpr int64_t kImageBytes = kCifar10RecordBytes - 1;
const char* const kHint = "run tools/download_data.sh cifar10 (needs internet)";

std::string plural(int64_t n, const char* unit) {
  return std::to_string(n) + " " + unit + (n == 1 ? "" : "s");
}

// The number of records in `path`, from its size alone; checks the size as documented
// for read_cifar10_file.
int64_t record_count(const std::string& path, int64_t expected_records) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  DPT_CHECK(!ec) << path << ": cannot read its size: " << ec.message() << "; " << kHint;
  const int64_t bytes = static_cast<int64_t>(size);
  const int64_t records = bytes / kCifar10RecordBytes, rest = bytes % kCifar10RecordBytes;
  DPT_CHECK(bytes > 0) << path << ": empty file, expected records of " << kCifar10RecordBytes << " bytes";
  DPT_CHECK(rest == 0) << path << ": truncated: " << bytes << " bytes is not a whole number of "
                       << kCifar10RecordBytes << "-byte records (" << plural(records, "record") << " + "
                       << plural(rest, "byte") << ")";
  DPT_CHECK(expected_records == 0 || records == expected_records)
      << path << ": " << plural(records, "record") << " (" << bytes << " bytes), expected "
      << expected_records << " (" << expected_records * kCifar10RecordBytes
      << " bytes) as in every CIFAR-10 batch file";
  return records;
}

// Reads `records` records of `path` into images[0 .. records * 3072) and labels[0 .. records).
void read_records(const std::string& path, int64_t records, uint8_t* images, int64_t* labels) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), std::fclose);
  DPT_CHECK(file != nullptr) << path << ": cannot open: " << std::strerror(errno);
  for (int64_t i = 0; i < records; ++i) {
    const int64_t offset = i * kCifar10RecordBytes;
    uint8_t label = 0;
    uint8_t* image = images + i * kImageBytes;
    const bool read = std::fread(&label, 1, 1, file.get()) == 1 &&
                      std::fread(image, 1, kImageBytes, file.get()) == static_cast<size_t>(kImageBytes);
    // The size was checked, so a short read means the file changed or the disk failed.
    DPT_CHECK(read) << path << ": read error in record " << i << " (offset " << offset
                    << "): " << (std::ferror(file.get()) ? std::strerror(errno) : "unexpected end of file");
    DPT_CHECK(label < kClasses) << path << ": record " << i << " (offset " << offset << "): label "
                                << int{label} << " is out of range, expected 0.." << kClasses - 1;
    labels[i] = label;
  }
}

}  // namespace

Normalization normalization_cifar10() { return {{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}}; }

Cifar10Records read_cifar10_file(const std::string& path, int64_t expected_records) {
  const int64_t records = record_count(path, expected_records);
  Cifar10Records out;
  out.images.resize(static_cast<size_t>(records * kImageBytes));
  out.labels.resize(static_cast<size_t>(records));
  read_records(path, records, out.images.data(), out.labels.data());
  return out;
}

Dataset load_cifar10(const std::string& dir, bool train) {
  std::vector<std::string> names;
  if (train) {
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  } else {
    names.push_back("test_batch.bin");
  }
  const std::string wanted = train ? "data_batch_1.bin .. data_batch_5.bin" : std::string("test_batch.bin");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    DPT_FAIL() << "CIFAR-10 directory '" << dir << "' not found (looked for " << wanted << " in it); "
               << kHint;
  }
  // The archive extracts to a subdirectory: say so when that is where the files are.
  const fs::path nested = fs::path(dir) / "cifar-10-batches-bin";
  const std::string nested_hint =
      fs::is_directory(nested, ec) ? "; did you mean dataset.path: " + nested.string() + "?" : "";
  std::vector<std::string> paths;
  for (const auto& name : names) {
    const fs::path path = fs::path(dir) / name;
    if (!fs::is_regular_file(path, ec)) {
      DPT_FAIL() << "CIFAR-10 file not found: looked for " << path.string() << " (the "
                 << (train ? "training" : "test") << " set is " << wanted << " in " << dir << ")"
                 << nested_hint << "; " << kHint;
    }
    paths.push_back(path.string());
  }
  // Every size is checked before the dataset is allocated.
  for (const auto& path : paths) record_count(path, kCifar10BatchRecords);

  Dataset d;
  const int64_t total = kCifar10BatchRecords * static_cast<int64_t>(paths.size());
  d.images.resize(static_cast<size_t>(total * kImageBytes));
  d.labels.resize(static_cast<size_t>(total));
  for (size_t f = 0; f < paths.size(); ++f) {
    const int64_t first = kCifar10BatchRecords * static_cast<int64_t>(f);
    read_records(paths[f], kCifar10BatchRecords, d.images.data() + first * kImageBytes,
                 d.labels.data() + first);
  }
  d.channels = 3;
  d.height = 32;
  d.width = 32;
  d.classes = kClasses;
  d.normalization = normalization_cifar10();
  dataset_check(d);
  return d;
}

}  // namespace dpt::data
