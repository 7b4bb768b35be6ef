#include "train/evaluate.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "comm/dist.h"
#include "datasets/sampler.h"
#include "ops/loss.h"

namespace dpt::train {

EvalResult evaluate(nn::Module& model, BatchSource& source, int share, int shares) {
  autograd::NoGrad no_grad;
  model.eval();
  const dist::InitInfo& world = dist::info();
  data::Loader& loader = source.loader();
  if (share < 0) share = world.rank, shares = world.world_size;
  loader.start_epoch(data::eval_shard(loader.dataset().size(), share, shares));
  source.restart();
  // The totals (loss summed over samples, correct predictions, samples) stay on the model's
  // device, are all-reduced there and read back once: a GPU is waited for only at the end.
  // They cover the whole test set, so every rank decides alike, before any collective.
  const int64_t samples = loader.dataset().size();
  DPT_CHECK(samples < (int64_t{1} << 24))
      << "evaluation: " << samples << " test samples; the counts, kept in f32, are exact below 2^24";
  const Kernels& k = kernels_for(source.device());
  Tensor totals = Tensor::zeros({3}, DType::f32, source.device());
  data::Batch batch;
  while (source.next(batch)) {
    Tensor logits = model(batch.images);
    k.eval_totals_add(totals, cross_entropy(logits, batch.labels), logits, batch.labels);
  }
  if (world.world_size > 1) dist::world()->all_reduce(totals, dist::ReduceOp::sum)->wait();
  const std::vector<float> t = totals.to_vector();
  model.train();
  return {t[0] / t[2], t[1] / t[2]};
}

}  // namespace dpt::train
