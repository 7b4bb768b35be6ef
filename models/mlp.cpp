// mlp: flatten, then Linear+ReLU for each hidden width, then a Linear classifier.
//   model: {name: mlp, hidden: [256, 128], dropout: 0.0}
#include "models/registry.h"
#include "nn/layers.h"
#include "nn/sequential.h"

namespace dpt::models {
namespace {

nn::ModulePtr build_mlp(ModelArgs& args, const ModelSpec& spec) {
  auto hidden = args.get<std::vector<int64_t>>("hidden", {256});
  float dropout = args.get<float>("dropout", 0.0f);
  Rng rng(spec.seed);
  auto net = std::make_shared<nn::Sequential>();
  net->add(std::make_shared<nn::Flatten>());
  int64_t width = spec.in_channels * spec.height * spec.width;
  for (int64_t h : hidden) {
    net->add(std::make_shared<nn::Linear>(width, h, rng, true, nn::Init::kaiming_uniform));
    net->add(std::make_shared<nn::ReLU>());
    if (dropout > 0) net->add(std::make_shared<nn::Dropout>(dropout, spec.seed + 1));
    width = h;
  }
  net->add(std::make_shared<nn::Linear>(width, spec.num_classes, rng));
  return net;
}

}  // namespace

DPT_REGISTER_MODEL(mlp, build_mlp);

}  // namespace dpt::models
