#include "train/evaluate.h"

#include "autograd/node.h"
#include "backend/kernels.h"
#include "comm/dist.h"
#include "datasets/sampler.h"
#include "ops/loss.h"

namespace dpt::train {
namespace {

// The totals kept on the model's device (loss summed over samples, correct predictions,
// samples), all-reduced there and read back once: an evaluation pass waits for a GPU only
// at its end.
std::vector<float> eval_totals(nn::Module& model, BatchSource& source) {
  // The all-reduced counts cover the whole test set (the ranks' shards partition it), and
  // every rank decides alike, before any collective.
  const int64_t samples = source.loader().dataset().size();
  DPT_CHECK(samples < (int64_t{1} << 24))
      << "evaluation: " << samples << " test samples; the counts, kept in f32, are exact below 2^24";
  const Kernels& k = kernels_for(source.device());
  Tensor totals = Tensor::zeros({3}, DType::f32, source.device());
  data::Batch batch;
  while (source.next(batch)) {
    Tensor logits = model(batch.images);
    k.eval_totals_add(totals, cross_entropy(logits, batch.labels), logits, batch.labels);
  }
  if (dist::info().world_size > 1) dist::world()->all_reduce(totals, dist::ReduceOp::sum)->wait();
  return totals.to_vector();
}

}  // namespace

EvalResult evaluate(nn::Module& model, BatchSource& source, int share, int shares) {
  autograd::NoGrad no_grad;
  model.eval();
  const dist::InitInfo& world = dist::info();
  data::Loader& loader = source.loader();
  if (share < 0) share = world.rank, shares = world.world_size;
  loader.start_epoch(data::eval_shard(loader.dataset().size(), share, shares));
  source.restart();
  std::vector<float> totals = eval_totals(model, source);
  model.train();
  return {totals[0] / totals[2], totals[1] / totals[2]};
}

}  // namespace dpt::train
