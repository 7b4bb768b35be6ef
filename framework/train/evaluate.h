// Evaluation on the test set, sharded over the ranks: each runs its part (data::eval_shard)
// and the totals (loss x samples, correct, samples) are summed over the ranks, kept on the
// device until the end.
#pragma once

#include "nn/module.h"
#include "train/batch_source.h"

namespace dpt::train {

struct EvalResult {
  double loss = 0;      // mean cross-entropy over the test set
  double accuracy = 0;  // fraction of samples whose largest logit (the first on ties) is the label
};

// Evaluates `model` on the whole of `source`'s dataset in eval mode without gradients (back
// in training mode after); this rank runs part `share` of `shares` (-1: one per rank; a
// tensor-parallel model passes its dp coordinate and size). Collective; every rank gets
// the same result. Throws dpt::Error for 2^24 test samples or more (f32 counts).
EvalResult evaluate(nn::Module& model, BatchSource& source, int share = -1, int shares = -1);

}  // namespace dpt::train
