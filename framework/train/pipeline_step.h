// Training with the model cut into pipeline stages (parallel.pp > 1): the ranks form a
// pp x dp mesh, each rank trains one stage (nn/pipeline_stage.h) of one data-parallel
// replica, and a step sends its micro-batches through the stages (dist::Pipeline). What the
// Trainer does differently for a pipeline is here: the stage it trains, the step, and
// gathering the stages back into the whole model for evaluation and saving.
#pragma once

#include <memory>
#include <string>

#include "parallel/pipeline.h"
#include "comm/process_group.h"
#include "io/config.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "train/parallel.h"
#include "train/step.h"

namespace dpt::train {

// What rank 0 prints: the mesh, each stage's units and ranks, the schedule. Lines end in \n.
std::string pipeline_describe(const io::Config& config, nn::Module& net, const ParallelLayout& layout);

// This rank's stage of `net` (sharing its tensors), on `device`, in DDP over the layout's
// dp group when dp > 1: what the optimizer and the step train. Throws dpt::Error when the
// model cannot be cut into pp stages. Collective over the dp group.
nn::ModulePtr pipeline_distribute(nn::Module& net, Device device, const io::Config& config,
                                  const ParallelLayout& layout);

// Each stage's parameters and buffers, broadcast from the rank that trains them to the
// other ranks of its pipeline group: afterwards `net` is the whole trained model on every
// rank (as evaluation and model.safetensors need). Collective over the pp group.
void pipeline_gather_model(nn::Module& net, const ParallelLayout& layout);

// One training step through the pipeline: every rank of a pipeline group passes the same
// batch; the loss is the cross-entropy of the last stage's output. A step is applied or
// stopped on every rank alike (the non-finite verdict is agreed over the world).
class PipelineStep : public Step {
 public:
  PipelineStep(const io::Config& config, nn::ModulePtr stage, const ParallelLayout& layout,
               optim::Optimizer& optimizer);
  io::RunControl::StepAction run(const data::Batch& batch, float lr, StepAt at, StepHooks hooks) override;

  // The measured bubble: the time stages waited (for their neighbours and messages) over
  // their step time, summed over the world's ranks and the steps since the last call.
  // Collective over the world.
  double take_bubble();
  // What the schedule's arithmetic predicts for equal stages: (S - 1) / (M + S - 1).
  double bubble_theory() const;

 private:
  dist::Pipeline pipeline_;
  optim::Optimizer& optimizer_;
  std::vector<Tensor> params_;         // the stage's
  io::RunControl* control_ = nullptr;  // the step's, for the loss hook
  double idle_ms_ = 0, step_ms_ = 0;   // since take_bubble
};

}  // namespace dpt::train
