// Tests for datasets/cifar10: the record reader on files of a few records it writes
// itself (exact bytes back, truncated, wrong count, bad label), the directory loader's
// checks and messages, and one full-size load from sparse files (zeros cost no disk).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "temp_dir.h"
#include "core/error.h"
#include "datasets/cifar10.h"
#include "error_of.h"

using namespace dpt;
using namespace dpt::data;
using dpt::testing::error_of;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;
constexpr int64_t kImage = kCifar10RecordBytes - 1;

// A fresh directory per test, removed afterwards.
class TempDir : public dpt::testing::TempDir {
 public:
  TempDir() : dpt::testing::TempDir("dpt_cifar10") {}
};

// The image of record `r` in test files: a different byte pattern per record.
Bytes image_of(int64_t r) {
  Bytes image(kImage);
  for (int64_t k = 0; k < kImage; ++k) image[k] = static_cast<uint8_t>((r * 31 + k * 7) & 255);
  return image;
}

// Records with these labels and image_of(first + i) as images.
Bytes records(const Bytes& labels, int64_t first = 0) {
  Bytes out;
  for (size_t i = 0; i < labels.size(); ++i) {
    out.push_back(labels[i]);
    Bytes image = image_of(first + static_cast<int64_t>(i));
    out.insert(out.end(), image.begin(), image.end());
  }
  return out;
}

void write_raw(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Overwrites the bytes of `path` at `offset` (the file exists).
void write_at(const std::string& path, int64_t offset, const Bytes& bytes) {
  std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
  out.seekp(offset);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

const char* const kTrainFiles[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                   "data_batch_4.bin", "data_batch_5.bin"};

}  // namespace

TEST(Cifar10, ReadsRecordsExactly) {
  TempDir dir;
  write_raw(dir.file("b.bin"), records({9, 0, 4}));
  for (int64_t expected : {0, 3}) {
    Cifar10Records read = read_cifar10_file(dir.file("b.bin"), expected);
    EXPECT_EQ(read.labels, (std::vector<int64_t>{9, 0, 4}));
    ASSERT_EQ(read.images.size(), static_cast<size_t>(3 * kImage));
    for (int64_t r = 0; r < 3; ++r)
      EXPECT_EQ(Bytes(read.images.begin() + r * kImage, read.images.begin() + (r + 1) * kImage), image_of(r));
  }
}

TEST(Cifar10, TruncatedOrPaddedFile) {
  TempDir dir;
  Bytes three = records({1, 2, 3});
  Bytes plus_one = three;
  plus_one.push_back(0);
  write_raw(dir.file("plus_one.bin"), plus_one);
  EXPECT_THAT(
      error_of([&] { read_cifar10_file(dir.file("plus_one.bin")); }),
      HasSubstr(dir.file("plus_one.bin") +
                ": truncated: 9220 bytes is not a whole number of 3073-byte records (3 records + 1 byte)"));
  write_raw(dir.file("cut.bin"), Bytes(three.begin(), three.end() - 100));
  EXPECT_THAT(error_of([&] { read_cifar10_file(dir.file("cut.bin"), 3); }),
              HasSubstr("9119 bytes is not a whole number of 3073-byte records (2 records + 2973 bytes)"));
  write_raw(dir.file("empty.bin"), {});
  EXPECT_THAT(error_of([&] { read_cifar10_file(dir.file("empty.bin")); }),
              HasSubstr(dir.file("empty.bin") + ": empty file"));
}

TEST(Cifar10, WrongRecordCount) {
  TempDir dir;
  write_raw(dir.file("b.bin"), records({1, 2, 3}));
  EXPECT_THAT(error_of([&] { read_cifar10_file(dir.file("b.bin"), 5); }),
              HasSubstr(dir.file("b.bin") + ": 3 records (9219 bytes), expected 5 (15365 bytes)"));
}

TEST(Cifar10, LabelOutOfRangeNamesRecordAndOffset) {
  TempDir dir;
  write_raw(dir.file("b.bin"), records({1, 9, 10, 3}));
  EXPECT_THAT(
      error_of([&] { read_cifar10_file(dir.file("b.bin")); }),
      HasSubstr(dir.file("b.bin") + ": record 2 (offset 6146): label 10 is out of range, expected 0..9"));
}

TEST(Cifar10, MissingFile) {
  TempDir dir;
  std::string message = error_of([&] { read_cifar10_file(dir.file("nope.bin")); });
  EXPECT_THAT(message, HasSubstr(dir.file("nope.bin")));
  EXPECT_THAT(message, HasSubstr("run tools/download_data.sh cifar10 (needs internet)"));
}

TEST(Cifar10, MissingDirectoryOrFileSaysWhatAndHow) {
  TempDir dir;
  const std::string missing = dir.file("nowhere");
  std::string message = error_of([&] { load_cifar10(missing, true); });
  EXPECT_THAT(message,
              HasSubstr("CIFAR-10 directory '" + missing +
                        "' not found (looked for data_batch_1.bin .. "
                        "data_batch_5.bin in it); run tools/download_data.sh cifar10 (needs internet)"));
  EXPECT_THAT(error_of([&] { load_cifar10(missing, false); }), HasSubstr("looked for test_batch.bin in it"));

  for (int i = 0; i < 4; ++i) write_raw(dir.file(kTrainFiles[i]), records({1}));
  message = error_of([&] { load_cifar10(dir.path(), true); });
  EXPECT_THAT(message, HasSubstr("CIFAR-10 file not found: looked for " + dir.file("data_batch_5.bin")));
  EXPECT_THAT(message, HasSubstr("run tools/download_data.sh cifar10 (needs internet)"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("did you mean")));
  message = error_of([&] { load_cifar10(dir.path(), false); });
  EXPECT_THAT(message, HasSubstr("looked for " + dir.file("test_batch.bin")));

  // Pointed at the archive's parent: the message names the directory the files are in.
  fs::create_directory(dir.file("cifar-10-batches-bin"));
  EXPECT_THAT(error_of([&] { load_cifar10(dir.path(), false); }),
              HasSubstr("did you mean dataset.path: " + dir.file("cifar-10-batches-bin") + "?"));
}

TEST(Cifar10, DirectoryFilesMustHoldTenThousandRecords) {
  TempDir dir;
  for (const char* name : kTrainFiles) write_raw(dir.file(name), records({1, 2}));
  write_raw(dir.file("test_batch.bin"), records({3}));
  EXPECT_THAT(
      error_of([&] { load_cifar10(dir.path(), true); }),
      HasSubstr(dir.file("data_batch_1.bin") + ": 2 records (6146 bytes), expected 10000 (30730000 bytes)"));
  EXPECT_THAT(error_of([&] { load_cifar10(dir.path(), false); }),
              HasSubstr(dir.file("test_batch.bin") + ": 1 record (3073 bytes), expected 10000"));
  // Every file is checked before anything is read: a bad last file fails as fast.
  for (const char* name : kTrainFiles) fs::resize_file(dir.file(name), 30730000);
  fs::resize_file(dir.file("data_batch_5.bin"), 30730001);
  EXPECT_THAT(
      error_of([&] { load_cifar10(dir.path(), true); }),
      HasSubstr(dir.file("data_batch_5.bin") +
                ": truncated: 30730001 bytes is not a whole number of 3073-byte records (10000 records + "
                "1 byte)"));
}

// Full-size files of zeros (sparse, so cheap) with known records at the start and end
// of each: checks the files land in order and the dataset's geometry.
TEST(Cifar10, LoadsFullDirectoryInFileOrder) {
  TempDir dir;
  const int64_t file_bytes = kCifar10BatchRecords * kCifar10RecordBytes;
  std::vector<std::string> names(std::begin(kTrainFiles), std::end(kTrainFiles));
  names.push_back("test_batch.bin");
  for (size_t f = 0; f < names.size(); ++f) {
    write_raw(dir.file(names[f]), {});
    fs::resize_file(dir.file(names[f]), static_cast<uintmax_t>(file_bytes));
    const uint8_t label = static_cast<uint8_t>(f);
    write_at(dir.file(names[f]), 0, records({label}, static_cast<int64_t>(2 * f)));
    write_at(dir.file(names[f]), file_bytes - kCifar10RecordBytes,
             records({static_cast<uint8_t>(9 - label)}, static_cast<int64_t>(2 * f + 1)));
  }
  for (bool train : {true, false}) {
    Dataset d = load_cifar10(dir.path(), train);
    const int64_t files = train ? 5 : 1;
    ASSERT_EQ(d.size(), files * kCifar10BatchRecords);
    EXPECT_EQ(d.channels, 3);
    EXPECT_EQ(d.height, 32);
    EXPECT_EQ(d.width, 32);
    EXPECT_EQ(d.classes, 10);
    EXPECT_EQ(d.normalization.mean, normalization_cifar10().mean);
    EXPECT_EQ(d.normalization.std, normalization_cifar10().std);
    for (int64_t f = 0; f < files; ++f) {
      const int64_t file = train ? f : 5;
      const int64_t first = f * kCifar10BatchRecords, last = first + kCifar10BatchRecords - 1;
      EXPECT_EQ(d.labels[first], file);
      EXPECT_EQ(d.labels[last], 9 - file);
      EXPECT_EQ(d.labels[first + 1], 0);
      EXPECT_EQ(Bytes(d.images.begin() + first * kImage, d.images.begin() + (first + 1) * kImage),
                image_of(2 * file));
      EXPECT_EQ(Bytes(d.images.begin() + last * kImage, d.images.begin() + (last + 1) * kImage),
                image_of(2 * file + 1));
    }
  }
}

TEST(Cifar10, Normalisation) {
  Normalization n = normalization_cifar10();
  EXPECT_EQ(n.mean, (std::vector<float>{0.4914f, 0.4822f, 0.4465f}));
  EXPECT_EQ(n.std, (std::vector<float>{0.2470f, 0.2435f, 0.2616f}));
}

// The real data, where a machine has it (tools/download_data.sh cifar10).
TEST(Cifar10, RealDataWhenPresent) {
  const char* source = std::getenv("DPT_SOURCE_DIR");
  const std::string dir = std::string(source ? source : ".") + "/data/cifar10/cifar-10-batches-bin";
  if (!fs::is_directory(dir)) GTEST_SKIP() << dir << " not present (tools/download_data.sh cifar10)";
  Dataset train = load_cifar10(dir, true), test = load_cifar10(dir, false);
  EXPECT_EQ(train.size(), 50000);
  EXPECT_EQ(test.size(), 10000);
  std::vector<int64_t> per_class(10, 0);
  for (int64_t label : test.labels) ++per_class[label];
  EXPECT_EQ(per_class, std::vector<int64_t>(10, 1000));  // the test set is balanced
}
