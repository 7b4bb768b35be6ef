// How a run lays its ranks out: the `parallel:` section as a device mesh. With tp > 1, dp x tp
// ranks, tp varying fastest (a tensor-parallel group holds neighbouring ranks, as Megatron-LM
// places them); with pp > 1, pp x dp ranks, rank r holding stage r / dp of data-parallel
// replica r % dp; otherwise DDP over the world and no mesh. The Trainer asks it which group
// DDP averages over, which group a model splits its layers over or passes its stages along,
// and which share of the data a rank reads (the ranks of one tp group, or of one pipeline,
// read the same samples).
#pragma once

#include <string>

#include "comm/process_group.h"
#include "io/config.h"

namespace dpt::train {

struct ParallelLayout {
  int dp = 1, tp = 1, pp = 1;
  dist::GroupPtr dp_group;  // DDP's: the ranks holding the same slices (or stage) of the model
  dist::GroupPtr tp_group;  // the model's, with tp > 1: the ranks splitting its layers
  dist::GroupPtr pp_group;  // with pp > 1: the stages of this rank's replica, in stage order
  int stage = 0;            // the pipeline stage this rank trains
  int data_rank = 0;        // which of the dp shares of each batch and epoch this rank reads
};

// The layout `config.parallel` asks for, its groups made from a dist::DeviceMesh when tp > 1
// or pp > 1. Collective over the world. Throws dpt::Error (one line, naming the key and the
// world size) when dp x tp x pp is not the world size; for tp > 1 with pp > 1; for tp > 1 with
// a model whose `tensor_parallel` is not true (it would be copied, not split); for tp > 1 with
// checkpoints or `resume` (a checkpoint holds one rank's model, a tp rank holds a slice); and
// for pp > 1 with `resume` (its checkpoints hold one stage's optimizer state).
ParallelLayout parallel_layout(const io::Config& config, const std::string& resume);

}  // namespace dpt::train
