// Tests for datasets/: the IDX reader on tiny files it writes itself (raw and gzip, valid
// and corrupt), the MNIST directory loader, normalisation, synthetic data, the
// deterministic shuffle and the background loader. Fashion-MNIST itself is checked when
// the machine has it (Debian package dataset-fashion-mnist).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include "temp_dir.h"
#include "error_of.h"
#include "core/error.h"
#include "datasets/dataset.h"
#include "datasets/idx.h"
#include "datasets/loader.h"
#include "datasets/mnist.h"
#include "datasets/shuffle.h"
#include "datasets/synthetic.h"

using namespace dpt;
using namespace dpt::data;
using dpt::testing::error_of;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

// A fresh directory per test, removed afterwards.
class TempDir : public dpt::testing::TempDir {
 public:
  TempDir() : dpt::testing::TempDir("dpt_datasets") {}
};

void put_be32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

Bytes images_file(uint32_t count, uint32_t rows, uint32_t cols, const Bytes& pixels, uint32_t magic = 0x803) {
  Bytes out;
  put_be32(out, magic);
  put_be32(out, count);
  put_be32(out, rows);
  put_be32(out, cols);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

Bytes labels_file(const Bytes& labels, uint32_t count_in_header) {
  Bytes out;
  put_be32(out, 0x801);
  put_be32(out, count_in_header);
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}
Bytes labels_file(const Bytes& labels) { return labels_file(labels, static_cast<uint32_t>(labels.size())); }

void write_raw(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_gz(const std::string& path, const Bytes& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(gz), Z_OK);
}

Bytes read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Bytes iota_bytes(size_t n, uint8_t start = 0) {
  Bytes b(n);
  std::iota(b.begin(), b.end(), start);
  return b;
}

}  // namespace

// --- IDX reader

TEST(Idx, ReadsRawAndGzipExactly) {
  TempDir dir;
  Bytes pixels = iota_bytes(3 * 2 * 4, 7);
  for (bool gz : {false, true}) {
    std::string images = dir.file(gz ? "i.gz" : "i"), labels = dir.file(gz ? "l.gz" : "l");
    (gz ? write_gz : write_raw)(images, images_file(3, 2, 4, pixels));
    (gz ? write_gz : write_raw)(labels, labels_file({9, 0, 4}));
    IdxImages read = idx_read_images(images);
    EXPECT_EQ(read.count, 3);
    EXPECT_EQ(read.rows, 2);
    EXPECT_EQ(read.cols, 4);
    EXPECT_EQ(read.pixels, pixels);
    EXPECT_EQ(idx_read_labels(labels, 10), (std::vector<int64_t>{9, 0, 4}));
  }
}

TEST(Idx, DetectsGzipByMagicNotByName) {
  TempDir dir;
  Bytes pixels = iota_bytes(2 * 3 * 3);
  write_gz(dir.file("gzip_without_suffix"), images_file(2, 3, 3, pixels));
  write_raw(dir.file("raw_with_suffix.gz"), images_file(2, 3, 3, pixels));
  EXPECT_EQ(idx_read_images(dir.file("gzip_without_suffix")).pixels, pixels);
  EXPECT_EQ(idx_read_images(dir.file("raw_with_suffix.gz")).pixels, pixels);
}

TEST(Idx, WrongMagic) {
  TempDir dir;
  write_raw(dir.file("labels"), labels_file({1, 2}));
  std::string message = error_of([&] { idx_read_images(dir.file("labels")); });
  EXPECT_THAT(message, HasSubstr(dir.file("labels")));
  EXPECT_THAT(message, HasSubstr("offset 0: bad magic 0x00000801, expected 0x00000803"));
  write_raw(dir.file("images"), images_file(1, 1, 1, {0}));
  message = error_of([&] { idx_read_labels(dir.file("images"), 10); });
  EXPECT_THAT(message, HasSubstr("bad magic 0x00000803, expected 0x00000801"));
}

TEST(Idx, TruncatedHeader) {
  TempDir dir;
  Bytes header = images_file(1, 28, 28, {});
  for (bool gz : {false, true}) {
    std::string path = dir.file(gz ? "short.gz" : "short");
    (gz ? write_gz : write_raw)(path, Bytes(header.begin(), header.begin() + 10));
    std::string message = error_of([&] { idx_read_images(path); });
    EXPECT_THAT(message, HasSubstr(path + ": truncated header: expected 16 bytes"));
    EXPECT_THAT(message, HasSubstr("the file has 10 bytes"));
  }
  write_raw(dir.file("empty"), {});
  EXPECT_THAT(error_of([&] { idx_read_labels(dir.file("empty"), 10); }), HasSubstr("truncated header"));
}

TEST(Idx, TruncatedData) {
  TempDir dir;
  Bytes file = images_file(3, 2, 4, iota_bytes(3 * 2 * 4));
  file.resize(file.size() - 19);  // 16 header + 5 pixel bytes left
  for (bool gz : {false, true}) {
    std::string path = dir.file(gz ? "t.gz" : "t");
    (gz ? write_gz : write_raw)(path, file);
    std::string message = error_of([&] { idx_read_images(path); });
    EXPECT_THAT(
        message,
        HasSubstr(path + ": truncated: header says 3 images of 2x4 (40 bytes) but the file has 21 bytes"));
  }
  write_raw(dir.file("l"), labels_file({1, 2}, 5));
  EXPECT_THAT(error_of([&] { idx_read_labels(dir.file("l"), 10); }),
              HasSubstr("truncated: header says 5 labels (13 bytes) but the file has 10 bytes"));
}

TEST(Idx, TrailingBytes) {
  TempDir dir;
  Bytes file = images_file(1, 2, 2, iota_bytes(4 + 3));
  for (bool gz : {false, true}) {
    std::string path = dir.file(gz ? "t.gz" : "t");
    (gz ? write_gz : write_raw)(path, file);
    EXPECT_THAT(
        error_of([&] { idx_read_images(path); }),
        HasSubstr(path +
                  ": trailing bytes: header says 1 images of 2x2 (20 bytes) but the file has 23 bytes"));
  }
}

// A corrupt header must be reported, not trusted: no 2^31 * 784-byte allocation.
TEST(Idx, HugeClaimInSmallFileIsAnErrorNotAnAllocation) {
  TempDir dir;
  Bytes file = images_file(1u << 31, 28, 28, Bytes(1000, 0));
  for (bool gz : {false, true}) {
    std::string path = dir.file(gz ? "huge.gz" : "huge");
    (gz ? write_gz : write_raw)(path, file);
    std::string message = error_of([&] { idx_read_images(path); });
    EXPECT_THAT(
        message,
        HasSubstr(path + ": truncated: header says 2147483648 images of 28x28 (1683627180048 bytes)"));
    EXPECT_THAT(message, HasSubstr("but the file has 1016 bytes"));
  }
  write_raw(dir.file("overflow"), images_file(0xffffffffu, 0xffffffffu, 0xffffffffu, {}));
  EXPECT_THAT(
      error_of([&] { idx_read_images(dir.file("overflow")); }),
      HasSubstr(
          "header says 4294967295 images of 4294967295x4294967295, which does not fit in 64-bit sizes"));
  // rows x cols alone passes 2^63 (UndefinedBehaviorSanitizer caught it being computed unchecked).
  write_raw(dir.file("rows_cols"), images_file(1, 0xffffffffu, 0xffffffffu, {}));
  EXPECT_THAT(error_of([&] { idx_read_images(dir.file("rows_cols")); }),
              HasSubstr("header says 1 images of 4294967295x4294967295, which does not fit in 64-bit sizes"));
}

TEST(Idx, ZeroDimension) {
  TempDir dir;
  write_raw(dir.file("z"), images_file(2, 0, 28, {}));
  EXPECT_THAT(error_of([&] { idx_read_images(dir.file("z")); }),
              HasSubstr(dir.file("z") + ": offset 8: dimension 1 (rows) is 0, expected > 0"));
}

TEST(Idx, LabelOutOfRange) {
  TempDir dir;
  write_gz(dir.file("l.gz"), labels_file({3, 9, 10, 1}));
  EXPECT_THAT(error_of([&] { idx_read_labels(dir.file("l.gz"), 10); }),
              HasSubstr(dir.file("l.gz") + ": offset 10: label 10 of item 2 is out of range, expected 0..9"));
}

TEST(Idx, CorruptGzip) {
  TempDir dir;
  write_gz(dir.file("ok.gz"), images_file(4, 8, 8, Bytes(256, 42)));
  Bytes gz = read_raw(dir.file("ok.gz"));
  gz.resize(gz.size() / 2);  // cut the compressed stream mid-way
  write_raw(dir.file("cut.gz"), gz);
  std::string message = error_of([&] { idx_read_images(dir.file("cut.gz")); });
  EXPECT_THAT(message, HasSubstr(dir.file("cut.gz")));
  EXPECT_THAT(message, ::testing::AnyOf(HasSubstr("corrupt gzip"), HasSubstr("truncated")));
}

TEST(Idx, MissingFile) {
  EXPECT_THAT(error_of([] { idx_read_images("/nonexistent/dir/x-idx3-ubyte"); }),
              HasSubstr("/nonexistent/dir/x-idx3-ubyte: cannot open: No such file"));
}

// --- MNIST directory loader

namespace {

// Writes a split of `count` images of 2x3 (pixel = image index) and the given labels.
void write_split(const TempDir& dir, const std::string& split, const Bytes& labels, bool gz, uint32_t count) {
  Bytes pixels;
  for (uint32_t i = 0; i < count; ++i) pixels.insert(pixels.end(), 6, static_cast<uint8_t>(i));
  auto write = gz ? write_gz : write_raw;
  std::string suffix = gz ? ".gz" : "";
  write(dir.file(split + "-images-idx3-ubyte" + suffix), images_file(count, 2, 3, pixels));
  write(dir.file(split + "-labels-idx1-ubyte" + suffix), labels_file(labels));
}

}  // namespace

TEST(Mnist, LoadsSplitPreferringGzip) {
  TempDir dir;
  write_split(dir, "train", {1, 2, 3}, /*gz=*/false, 3);
  write_split(dir, "train", {5, 6}, /*gz=*/true, 2);
  write_split(dir, "t10k", {7}, /*gz=*/false, 1);
  Dataset train = load_mnist(dir.path(), true);
  EXPECT_EQ(train.labels, (std::vector<int64_t>{5, 6}));  // the .gz pair, not the raw one
  EXPECT_EQ(train.size(), 2);
  EXPECT_EQ(train.channels, 1);
  EXPECT_EQ(train.height, 2);
  EXPECT_EQ(train.width, 3);
  EXPECT_EQ(train.classes, 10);
  EXPECT_EQ(train.images, (Bytes{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(train.normalization.mean, std::vector<float>{0.1307f});
  Dataset test = load_fashion_mnist(dir.path(), false);  // raw only
  EXPECT_EQ(test.labels, std::vector<int64_t>{7});
  EXPECT_EQ(test.normalization.std, std::vector<float>{0.3530f});
}

TEST(Mnist, CountMismatch) {
  TempDir dir;
  write_split(dir, "train", {1, 2}, false, 3);
  std::string message = error_of([&] { load_mnist(dir.path(), true); });
  EXPECT_THAT(message, HasSubstr(dir.file("train-images-idx3-ubyte") + " has 3 images but "));
  EXPECT_THAT(message, HasSubstr(dir.file("train-labels-idx1-ubyte") + " has 2 labels"));
}

TEST(Mnist, MissingDirectoryAndFilesSayHowToGetTheData) {
  EXPECT_THAT(
      error_of([] { load_mnist("/nonexistent/data/mnist", true); }),
      HasSubstr("dataset directory '/nonexistent/data/mnist' not found; run tools/download_data.sh mnist "
                "(needs internet)"));
  EXPECT_THAT(error_of([] { load_fashion_mnist("/nonexistent/fashion", false); }),
              HasSubstr("apt-get install dataset-fashion-mnist"));
  TempDir dir;
  write_split(dir, "train", {1}, true, 1);
  fs::remove(dir.file("train-labels-idx1-ubyte.gz"));
  std::string message =
      error_of([&] { load_mnist_dir(dir.path(), true, normalization_mnist(), "get it somehow"); });
  EXPECT_THAT(message,
              HasSubstr("dataset file not found: looked for " + dir.file("train-labels-idx1-ubyte.gz") +
                        " and " + dir.file("train-labels-idx1-ubyte") + "; get it somehow"));
}

TEST(Mnist, FashionMnistFromTheDebianPackage) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << dir << " not present (apt-get install dataset-fashion-mnist)";
  }
  for (bool train : {true, false}) {
    Dataset d = load_fashion_mnist(dir, train);
    const int64_t n = train ? 60000 : 10000;
    EXPECT_EQ(d.size(), n);
    EXPECT_EQ(d.height, 28);
    EXPECT_EQ(d.width, 28);
    EXPECT_EQ(static_cast<int64_t>(d.images.size()), n * 784);
    std::map<int64_t, int64_t> per_class;
    for (int64_t label : d.labels) per_class[label]++;
    ASSERT_EQ(per_class.size(), 10u);
    for (auto [label, count] : per_class) {
      EXPECT_TRUE(label >= 0 && label < 10);
      EXPECT_EQ(count, n / 10) << "class " << label;  // Fashion-MNIST is balanced
    }
  }
}

// --- Dataset, normalisation, synthetic data

namespace {

// `n` samples of 1x1x2 whose label is their index, pixels (index, 255 - index).
Dataset indexed_dataset(int64_t n) {
  Dataset d;
  d.channels = 1;
  d.height = 1;
  d.width = 2;
  d.classes = n;
  d.normalization = normalization_mnist();
  for (int64_t i = 0; i < n; ++i) {
    d.images.push_back(static_cast<uint8_t>(i));
    d.images.push_back(static_cast<uint8_t>(255 - i));
    d.labels.push_back(i);
  }
  return d;
}

}  // namespace

TEST(Dataset, SampleToFloatNormalisesPerChannel) {
  Dataset d;
  d.channels = 2;
  d.height = 1;
  d.width = 3;
  d.classes = 2;
  d.normalization = {{0.5f, 0.1307f}, {0.25f, 0.3081f}};
  d.images = {0, 51, 255, 0, 51, 255, /*second sample*/ 1, 2, 3, 4, 5, 6};
  d.labels = {0, 1};
  dataset_check(d);
  float out[6];
  dataset_sample_to_float(d, 0, out);
  const float expected[6] = {(0 - 0.5f) / 0.25f,      (0.2f - 0.5f) / 0.25f,      (1 - 0.5f) / 0.25f,
                             (0 - 0.1307f) / 0.3081f, (0.2f - 0.1307f) / 0.3081f, (1 - 0.1307f) / 0.3081f};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out[i], expected[i], 1e-5) << i;
}

TEST(Dataset, CheckRejectsInconsistentFields) {
  Dataset d = indexed_dataset(4);
  d.labels[2] = 4;
  EXPECT_THAT(error_of([&] { dataset_check(d); }),
              HasSubstr("label 4 of sample 2 is out of range, expected 0..3"));
  d = indexed_dataset(4);
  d.images.pop_back();
  EXPECT_THAT(error_of([&] { dataset_check(d); }), HasSubstr("7 pixel bytes for 4 samples"));
  d = indexed_dataset(4);
  d.normalization.std = {0};
  EXPECT_THAT(error_of([&] { dataset_check(d); }), HasSubstr("std must be > 0"));
}

TEST(Synthetic, ShapedDeterministicAndSeeded) {
  Dataset a = make_synthetic(3, 4, 5, 7, 50, 42);
  dataset_check(a);
  EXPECT_EQ(a.size(), 50);
  EXPECT_EQ(a.sample_numel(), 60);
  EXPECT_EQ(a.images.size(), 3000u);
  EXPECT_EQ(a.classes, 7);
  EXPECT_EQ(a.normalization.mean.size(), 3u);
  Dataset b = make_synthetic(3, 4, 5, 7, 50, 42);
  EXPECT_EQ(a.images, b.images);
  EXPECT_EQ(a.labels, b.labels);
  Dataset c = make_synthetic(3, 4, 5, 7, 50, 43);
  EXPECT_NE(a.images, c.images);
  EXPECT_NE(a.labels, c.labels);
  EXPECT_EQ(std::set<int64_t>(a.labels.begin(), a.labels.end()).size(), 7u);  // 50 draws hit all 7 classes
  EXPECT_THAT(error_of([] { make_synthetic(1, 0, 28, 10, 5, 0); }), HasSubstr("must all be > 0"));
}

TEST(Synthetic, MoreThanTheMachineHoldsIsAnErrorNotAnAllocation) {
  EXPECT_THAT(error_of([] { make_synthetic(1, 28, 28, 10, int64_t{1} << 40, 0); }),
              HasSubstr("synthetic dataset: 1099511627776 samples of 1x28x28 need 830472192 MiB (792 bytes each), more than this "
                        "machine's memory ("));
  // Sizes whose product does not fit in 64 bits, checked without overflowing.
  EXPECT_THAT(error_of([] { make_synthetic(3000000000, 3000000000, 3000000000, 10, 10, 0); }),
              HasSubstr("samples of 3000000000x3000000000x3000000000 need more than 2^63 bytes"));
}

TEST(Dataset, TrainAndTestSetsMustHaveTheSameGeometry) {
  Dataset train = make_synthetic(1, 28, 28, 10, 4, 0);
  dataset_check_split(train, make_synthetic(1, 28, 28, 10, 2, 1), "x");
  EXPECT_THAT(error_of([&] { dataset_check_split(train, make_synthetic(1, 32, 32, 10, 2, 1), "mnist in d"); }),
              HasSubstr("mnist in d: the training set has 1x28x28 images, 10 classes but the test set has "
                        "1x32x32 images, 10 classes; both must be the same"));
  EXPECT_THAT(error_of([&] { dataset_check_split(train, make_synthetic(3, 28, 28, 10, 2, 1), "x"); }),
              HasSubstr("the test set has 3x28x28 images"));
  EXPECT_THAT(error_of([&] { dataset_check_split(train, make_synthetic(1, 28, 28, 7, 2, 1), "x"); }),
              HasSubstr("the test set has 1x28x28 images, 7 classes"));
}

// --- Shuffle

TEST(Shuffle, PermutationFromSeedAndEpoch) {
  std::vector<int64_t> p = shuffle_permutation(1000, 7, 3);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(p, identity);
  EXPECT_EQ(p, shuffle_permutation(1000, 7, 3));
  EXPECT_NE(p, shuffle_permutation(1000, 7, 4));
  EXPECT_NE(p, shuffle_permutation(1000, 8, 3));
  EXPECT_TRUE(shuffle_permutation(0, 1, 1).empty());
  EXPECT_EQ(shuffle_permutation(1, 1, 1), std::vector<int64_t>{0});
}

// Pins the exact sequence: mt19937_64 and our Fisher-Yates are fully specified, so any
// platform or compiler must produce this (checked against an independent Python
// implementation of mt19937_64). A change here changes every run's data order.
TEST(Shuffle, SameOnEveryPlatform) {
  EXPECT_EQ(shuffle_permutation(10, 0, 0), (std::vector<int64_t>{6, 1, 2, 4, 7, 5, 3, 0, 9, 8}));
  EXPECT_EQ(shuffle_permutation(10, 1234, 5), (std::vector<int64_t>{9, 1, 8, 7, 6, 0, 5, 4, 2, 3}));
}

// --- Loader

namespace {

std::vector<int64_t> labels_of(const Batch& b) {
  const int64_t* p = b.labels.data<int64_t>();
  return std::vector<int64_t>(p, p + b.labels.numel());
}

LoaderOptions options_of(int64_t batch_size, bool shuffle = true, bool drop_last = true, uint64_t seed = 0,
                         int64_t prefetch = 2) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.seed = seed;
  o.prefetch = prefetch;
  return o;
}

// All batches of one epoch, as label lists.
std::vector<std::vector<int64_t>> epoch_labels(Loader& loader) {
  std::vector<std::vector<int64_t>> out;
  Batch b;
  while (loader.next(b)) out.push_back(labels_of(b));
  return out;
}

std::vector<int64_t> flatten(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace

TEST(Loader, BatchShapesAndTypes) {
  Dataset d = make_synthetic(3, 5, 4, 10, 20, 1);
  Loader loader(d, options_of(8, true, true, 0));
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.images.shape(), (Shape{8, 3, 5, 4}));
  EXPECT_EQ(b.images.dtype(), DType::f32);
  EXPECT_TRUE(b.images.is_contiguous());
  EXPECT_TRUE(b.images.device().is_cpu());
  EXPECT_EQ(b.labels.shape(), (Shape{8}));
  EXPECT_EQ(b.labels.dtype(), DType::i64);
}

TEST(Loader, EveryIndexOncePerEpochWithoutDropLast) {
  Dataset d = indexed_dataset(10);
  Loader loader(d, options_of(3, true, false, 5));
  EXPECT_EQ(loader.batches_per_epoch(), 4);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    loader.start_epoch(epoch);
    auto batches = epoch_labels(loader);
    ASSERT_EQ(batches.size(), 4u);
    EXPECT_EQ(batches.back().size(), 1u);
    EXPECT_EQ(flatten(batches), shuffle_permutation(10, 5, epoch));
    Batch b;
    EXPECT_FALSE(loader.next(b));  // stays at the end
  }
}

TEST(Loader, OrderDependsOnSeedAndEpochAndIsReproducible) {
  Dataset d = indexed_dataset(200);
  LoaderOptions options = options_of(16, true, false, 1);
  Loader a(d, options), b(d, options);
  options.seed = 2;
  Loader c(d, options);
  a.start_epoch(0);
  auto a0 = flatten(epoch_labels(a));
  a.start_epoch(1);
  auto a1 = flatten(epoch_labels(a));
  b.start_epoch(0);
  c.start_epoch(0);
  EXPECT_EQ(a0, flatten(epoch_labels(b)));
  EXPECT_NE(a0, a1);
  EXPECT_NE(a0, flatten(epoch_labels(c)));
  a.start_epoch(0);
  EXPECT_EQ(a0, flatten(epoch_labels(a)));
}

TEST(Loader, NoShuffleIsInOrderAndDropLastDropsTheTail) {
  Dataset d = indexed_dataset(10);
  Loader loader(d, options_of(3, false, true));
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  loader.start_epoch(0);
  EXPECT_EQ(epoch_labels(loader), (std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}));
}

TEST(Loader, ExplicitIndicesAreRespected) {
  Dataset d = indexed_dataset(10);
  Loader loader(d, options_of(3, true, false));
  loader.start_epoch(std::vector<int64_t>{7, 2, 2, 5});
  EXPECT_EQ(loader.batches_per_epoch(), 2);
  EXPECT_EQ(epoch_labels(loader), (std::vector<std::vector<int64_t>>{{7, 2, 2}, {5}}));
  loader.start_epoch(std::vector<int64_t>{});
  EXPECT_TRUE(epoch_labels(loader).empty());
  EXPECT_THAT(error_of([&] {
                loader.start_epoch(std::vector<int64_t>{1, 10});
              }),
              HasSubstr("index 10 at position 1 of the epoch is out of range, expected 0..9"));
}

TEST(Loader, ImagesNormalisedAsByHand) {
  Dataset d = indexed_dataset(6);
  Loader loader(d, options_of(4, false, false));
  loader.start_epoch(std::vector<int64_t>{3, 0, 5});
  Batch b;
  ASSERT_TRUE(loader.next(b));
  std::vector<float> got(b.images.data<float>(), b.images.data<float>() + b.images.numel());
  ASSERT_EQ(got.size(), 6u);
  const int64_t order[3] = {3, 0, 5};
  for (int s = 0; s < 3; ++s) {
    EXPECT_NEAR(got[2 * s], (order[s] / 255.0 - 0.1307) / 0.3081, 1e-5);
    EXPECT_NEAR(got[2 * s + 1], ((255 - order[s]) / 255.0 - 0.1307) / 0.3081, 1e-5);
  }
}

TEST(Loader, DestroyOrRestartMidEpoch) {
  Dataset d = make_synthetic(1, 28, 28, 10, 2000, 3);
  { Loader never_started(d, options_of(10)); }
  {
    Loader loader(d, options_of(10, true, true, 0, 3));
    loader.start_epoch(0);
    Batch b;
    ASSERT_TRUE(loader.next(b));
    // The worker is now blocked on a full queue; destruction must wake and join it.
  }
  Loader loader(d, options_of(10, true, false));
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  loader.start_epoch(1);
  EXPECT_EQ(epoch_labels(loader).size(), 200u);  // a full fresh epoch, nothing left over
}

TEST(Loader, WorkerExceptionIsRethrownInNext) {
  Dataset d = indexed_dataset(10);
  std::atomic<int> calls{0};
  LoaderOptions options = options_of(2, false, false);
  options.transform = [&](Batch&, int64_t, int64_t) {
    if (++calls == 2) throw Error("augmentation failed on purpose");
  };
  Loader loader(d, options);
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));  // the batch made before the failure still arrives
  EXPECT_EQ(labels_of(b), (std::vector<int64_t>{0, 1}));
  EXPECT_THAT(error_of([&] { loader.next(b); }), HasSubstr("augmentation failed on purpose"));
  EXPECT_FALSE(loader.next(b));
  loader.start_epoch(1);  // a new epoch works again
  ASSERT_TRUE(loader.next(b));
}

TEST(Loader, MisuseIsAnError) {
  Dataset d = indexed_dataset(4);
  Loader loader(d, options_of(2));
  Batch b;
  EXPECT_THAT(error_of([&] { loader.next(b); }), HasSubstr("before start_epoch"));
  EXPECT_THAT(error_of([&] { Loader bad(d, options_of(0)); }), HasSubstr("batch_size must be >= 1, got 0"));
}
