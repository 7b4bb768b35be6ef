#include "train/data.h"

#include <algorithm>

#include "datasets/cifar10.h"
#include "datasets/mnist.h"
#include "datasets/synthetic.h"

namespace dpt::train {
namespace {

TrainData load_sets(const io::DatasetConfig& c, uint64_t seed) {
  using io::DatasetName;
  if (c.name == DatasetName::fashion_mnist)
    return {data::load_fashion_mnist(c.path, true), data::load_fashion_mnist(c.path, false)};
  if (c.name == DatasetName::mnist) return {data::load_mnist(c.path, true), data::load_mnist(c.path, false)};
  if (c.name == DatasetName::cifar10)
    return {data::load_cifar10(c.path, true), data::load_cifar10(c.path, false)};
  return {data::make_synthetic(c.shape[0], c.shape[1], c.shape[2], c.classes, c.size, seed),
          data::make_synthetic(c.shape[0], c.shape[1], c.shape[2], c.classes,
                               std::max<int64_t>(c.size / 6, 1), seed + 1)};
}

}  // namespace

TrainData load_data(const io::DatasetConfig& config, uint64_t seed) {
  TrainData data = load_sets(config, seed);
  data::dataset_check_split(data.train, data.test,
                            io::name_of(config.name) + (config.path.empty() ? "" : " in " + config.path));
  return data;
}

}  // namespace dpt::train
