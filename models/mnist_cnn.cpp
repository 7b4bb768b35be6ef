// mnist_cnn: the classic small CNN for 28x28 digits — conv32 3x3, pool, conv64 3x3, pool,
// fc128, classifier (3x3 kernels with padding 1, 2x2 max-pooling).
//   model: {name: mnist_cnn, dropout: 0.0}
#include "models/registry.h"
#include "nn/layers.h"
#include "nn/sequential.h"

namespace dpt::models {
namespace {

nn::ModulePtr build_mnist_cnn(ModelArgs& args, const ModelSpec& spec) {
  float dropout = args.get<float>("dropout", 0.0f);
  Rng rng(spec.seed);
  Conv2dOptions same{.padding = 1};
  auto net = std::make_shared<nn::Sequential>();
  net->add(std::make_shared<nn::Conv2d>(spec.in_channels, 32, 3, rng, same))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Conv2d>(32, 64, 3, rng, same))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Flatten>())
      .add(std::make_shared<nn::Linear>(64 * (spec.height / 4) * (spec.width / 4), 128, rng, true,
                                        nn::Init::kaiming_uniform))
      .add(std::make_shared<nn::ReLU>());
  if (dropout > 0) net->add(std::make_shared<nn::Dropout>(dropout, spec.seed + 1));
  net->add(std::make_shared<nn::Linear>(128, spec.num_classes, rng));
  return net;
}

}  // namespace

DPT_REGISTER_MODEL(mnist_cnn, build_mnist_cnn);

}  // namespace dpt::models
