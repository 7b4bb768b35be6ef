// mlp: flatten, then Linear+ReLU for each hidden width, then a Linear classifier.
//   model: {name: mlp, hidden: [256, 128], dropout: 0.0, tensor_parallel: false}
// With tensor_parallel, consecutive Linear layers pair up as column- and row-parallel
// (nn/tensor_parallel.h) over the tensor-parallel group: the first hidden width is split
// over its ranks and the second layer's output is whole again; a last unpaired Linear (the
// classifier, for an even number of hidden layers) stays whole on every rank.
#include "models/registry.h"
#include "nn/layers.h"
#include "nn/sequential.h"
#include "parallel/tensor_parallel.h"

namespace dpt::models {
namespace {

nn::ModulePtr build_mlp(ModelArgs& args, const ModelSpec& spec) {
  auto hidden = args.get<std::vector<int64_t>>("hidden", {256});
  float dropout = args.get<float>("dropout", 0.0f);
  dist::GroupPtr tp = tensor_parallel_group(args, spec);
  Rng rng(spec.seed);
  auto net = std::make_shared<nn::Sequential>();
  net->add(std::make_shared<nn::Flatten>());
  std::vector<int64_t> widths = {spec.in_channels * spec.height * spec.width};
  widths.insert(widths.end(), hidden.begin(), hidden.end());
  widths.push_back(spec.num_classes);
  const size_t layers = widths.size() - 1;
  for (size_t i = 0; i < layers; ++i) {
    bool last = i + 1 == layers;
    auto full = std::make_shared<nn::Linear>(widths[i], widths[i + 1], rng, true,
                                             last ? nn::Init::torch_default : nn::Init::kaiming_uniform);
    bool column = tp && i % 2 == 0 && !last, row = tp && i % 2 == 1;
    if (column) {
      DPT_CHECK(widths[i + 1] % tp->size() == 0)
          << "model.hidden: width " << widths[i + 1] << " does not split evenly over the " << tp->size()
          << " ranks of the tensor-parallel group";
      net->add(std::make_shared<nn::ColumnParallelLinear>(*full, tp));
    } else if (row) {
      net->add(std::make_shared<nn::RowParallelLinear>(*full, tp));
    } else {
      net->add(full);
    }
    if (last) break;
    net->add(std::make_shared<nn::ReLU>());
    // Inside a column/row pair each rank holds other features, so each draws its own mask.
    if (dropout > 0)
      net->add(std::make_shared<nn::Dropout>(dropout, spec.seed + 1 + (column ? tp->rank() : 0)));
  }
  return net;
}

}  // namespace

DPT_REGISTER_MODEL(mlp, build_mlp);

}  // namespace dpt::models
