// One counted forward of a batch of one. Eval mode matters: a training-mode BN would
// update its running statistics from this batch (and needs more than one value per channel).
#include "models/summary.h"

#include "autograd/node.h"
#include "ops/mac_count.h"

namespace dpt::models {

int64_t macs_per_image(nn::Module& model, const ModelSpec& spec) {
  bool was_training = model.is_training();
  model.eval();
  autograd::NoGrad no_grad;
  MacCounter counter;
  try {
    model(Tensor::zeros({1, spec.in_channels, spec.height, spec.width}));
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  return counter.total();
}

}  // namespace dpt::models
