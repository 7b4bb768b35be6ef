#include "train/evaluate.h"

#include "autograd/node.h"
#include "datasets/sampler.h"
#include "distributed/dist.h"
#include "ops/loss.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/eval_totals.h"
#endif

namespace dpt::train {
namespace {

void sum_over_ranks(Tensor& values) {
  if (dist::info().world_size > 1) dist::world()->all_reduce(values, dist::ReduceOp::sum)->wait();
}

// The totals on the CPU: each batch's loss and count read at once, summed in double.
std::vector<float> host_totals(nn::Module& model, BatchSource& source) {
  data::Batch batch;
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  while (source.next(batch)) {
    Tensor logits = model(batch.images);
    const int64_t n = batch.labels.numel();
    loss_sum += cross_entropy(logits, batch.labels).item() * static_cast<double>(n);
    correct += count_correct(logits, batch.labels);
    seen += n;
  }
  Tensor totals = Tensor::from_vector(
      std::vector<float>{static_cast<float>(loss_sum), static_cast<float>(correct), static_cast<float>(seen)},
      {3});
  sum_over_ranks(totals);
  return totals.to_vector();
}

#ifdef DPT_WITH_CUDA
// The totals kept on the device, all-reduced there (NCCL, through the world group's
// forwarding) and read back once.
std::vector<float> device_totals(nn::Module& model, BatchSource& source) {
  // The all-reduced counts cover the whole test set (the ranks' shards partition it), and
  // every rank decides alike, before any collective.
  const int64_t samples = source.loader().dataset().size();
  DPT_CHECK(samples < (int64_t{1} << 24))
      << "evaluation: " << samples << " test samples; counts on the GPU are exact below 2^24";
  Tensor totals = Tensor::zeros({3}, DType::f32, source.device());
  data::Batch batch;
  while (source.next(batch)) {
    Tensor logits = model(batch.images);
    cuda::eval_totals_add(totals, cross_entropy(logits, batch.labels), logits, batch.labels);
  }
  sum_over_ranks(totals);
  return totals.to_vector();
}
#endif

}  // namespace

EvalResult evaluate(nn::Module& model, BatchSource& source) {
  autograd::NoGrad no_grad;
  model.eval();
  const dist::InitInfo& world = dist::info();
  data::Loader& loader = source.loader();
  loader.start_epoch(data::eval_shard(loader.dataset().size(), world.rank, world.world_size));
  source.restart();
  std::vector<float> totals;
#ifdef DPT_WITH_CUDA
  if (source.device().is_cuda()) totals = device_totals(model, source);
#endif
  if (source.device().is_cpu()) totals = host_totals(model, source);
  model.train();
  return {totals[0] / totals[2], totals[1] / totals[2]};
}

}  // namespace dpt::train
