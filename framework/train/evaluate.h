// Evaluation on the test set, sharded over the ranks: each rank runs its contiguous part
// (data::eval_shard), and the totals (loss x samples, correct predictions, samples) are
// summed over the ranks, so every test sample counts exactly once. On a CUDA device the
// totals stay there until the end (backend/cuda/eval_totals.h) and are all-reduced there.
#pragma once

#include "nn/module.h"
#include "train/batch_source.h"

namespace dpt::train {

struct EvalResult {
  double loss = 0;      // mean cross-entropy over the test set
  double accuracy = 0;  // fraction of samples whose largest logit (the first on ties) is the label
};

// Evaluates `model` (the bare model or its DDP wrapper) on the whole of `source`'s dataset,
// in eval mode and without gradients; the model is back in training mode after. Collective
// over the world; every rank gets the same result. On CUDA, throws dpt::Error for a test set
// of 2^24 samples or more (counts in f32 are exact below).
EvalResult evaluate(nn::Module& model, BatchSource& source);

}  // namespace dpt::train
