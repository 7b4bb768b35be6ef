// Finds the MNIST-format files in a directory and pairs images with labels.
#include "datasets/mnist.h"

#include <filesystem>

#include "core/error.h"
#include "datasets/idx.h"

namespace dpt::data {
namespace {

constexpr int64_t kClasses = 10;

std::string with_hint(const std::string& hint) { return hint.empty() ? "" : "; " + hint; }

// `dir`/`name`.gz if it exists, else `dir`/`name`, else an error listing both.
std::string find_file(const std::string& dir, const std::string& name, const std::string& hint) {
  namespace fs = std::filesystem;
  const fs::path gz = fs::path(dir) / (name + ".gz");
  const fs::path raw = fs::path(dir) / name;
  std::error_code ec;
  if (fs::is_regular_file(gz, ec)) return gz.string();
  if (fs::is_regular_file(raw, ec)) return raw.string();
  DPT_FAIL() << "dataset file not found: looked for " << gz.string() << " and " << raw.string()
             << with_hint(hint);
}

}  // namespace

Dataset load_mnist_dir(const std::string& dir, bool train, const Normalization& normalization,
                       const std::string& hint) {
  std::error_code ec;
  DPT_CHECK(std::filesystem::is_directory(dir, ec))
      << "dataset directory '" << dir << "' not found" << with_hint(hint);
  const std::string split = train ? "train" : "t10k";
  const std::string images_path = find_file(dir, split + "-images-idx3-ubyte", hint);
  const std::string labels_path = find_file(dir, split + "-labels-idx1-ubyte", hint);
  IdxImages images = idx_read_images(images_path);
  std::vector<int64_t> labels = idx_read_labels(labels_path, kClasses);
  DPT_CHECK(images.count == static_cast<int64_t>(labels.size()))
      << images_path << " has " << images.count << " images but " << labels_path << " has " << labels.size()
      << " labels; the counts must agree";
  Dataset d;
  d.images = std::move(images.pixels);
  d.labels = std::move(labels);
  d.channels = 1;
  d.height = images.rows;
  d.width = images.cols;
  d.classes = kClasses;
  d.normalization = normalization;
  dataset_check(d);
  return d;
}

Dataset load_mnist(const std::string& dir, bool train) {
  return load_mnist_dir(dir, train, normalization_mnist(),
                        "run tools/download_data.sh mnist (needs internet)");
}

Dataset load_fashion_mnist(const std::string& dir, bool train) {
  return load_mnist_dir(dir, train, normalization_fashion_mnist(),
                        "install it with: apt-get install dataset-fashion-mnist");
}

}  // namespace dpt::data
