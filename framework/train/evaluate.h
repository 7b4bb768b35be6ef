// Evaluation on the test set, sharded over the ranks: each rank runs its contiguous part
// (data::eval_shard), and the totals (loss x samples, correct predictions, samples) are
// summed over the ranks, so every test sample counts exactly once (or, on a mesh, once per
// rank of a tensor-parallel group, which leaves the means as they are). On a CUDA device the
// totals stay there until the end (backend/cuda/kernels.h) and are all-reduced there.
#pragma once

#include "nn/module.h"
#include "train/batch_source.h"

namespace dpt::train {

struct EvalResult {
  double loss = 0;      // mean cross-entropy over the test set
  double accuracy = 0;  // fraction of samples whose largest logit (the first on ties) is the label
};

// Evaluates `model` (the bare model or its DDP wrapper) on the whole of `source`'s dataset,
// in eval mode and without gradients; the model is back in training mode after. The test
// set is cut into `shares` parts and this rank runs part `share` (-1: as many parts as
// ranks, this rank's own; a tensor-parallel model passes its dp coordinate and size, so
// the ranks splitting its layers run the same samples). Collective over the world; every
// rank gets the same result. On CUDA, throws dpt::Error for a test set of 2^24 samples or
// more (counts in f32 are exact below).
EvalResult evaluate(nn::Module& model, BatchSource& source, int share = -1, int shares = -1);

}  // namespace dpt::train
