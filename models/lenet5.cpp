// lenet5 (LeCun et al. 1998) with ReLU and max-pooling: conv6 5x5, pool, conv16 5x5, pool,
// fc120, fc84, classifier. 28x28 inputs get padding 2 in the first conv, as in the
// original's 32x32 field, so both sizes reach a 5x5 map.
//   model: {name: lenet5}
#include "models/registry.h"
#include "nn/layers.h"
#include "nn/sequential.h"

namespace dpt::models {
namespace {

nn::ModulePtr build_lenet5(ModelArgs&, const ModelSpec& spec) {
  Rng rng(spec.seed);
  int64_t pad = spec.height < 32 ? (32 - spec.height) / 2 : 0;
  int64_t h = ((spec.height + 2 * pad - 4) / 2 - 4) / 2;
  int64_t w = ((spec.width + 2 * pad - 4) / 2 - 4) / 2;
  DPT_CHECK(h > 0 && w > 0) << "lenet5: input " << spec.height << "x" << spec.width << " is too small";
  auto net = std::make_shared<nn::Sequential>();
  net->add(std::make_shared<nn::Conv2d>(spec.in_channels, 6, 5, rng, Conv2dOptions{.padding = pad}))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Conv2d>(6, 16, 5, rng))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Flatten>())
      .add(std::make_shared<nn::Linear>(16 * h * w, 120, rng))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::Linear>(120, 84, rng))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::Linear>(84, spec.num_classes, rng));
  return net;
}

}  // namespace

DPT_REGISTER_MODEL(lenet5, build_lenet5);

}  // namespace dpt::models
