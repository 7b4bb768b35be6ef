// Pipeline parallelism: a model cut into S stages (nn/pipeline_stage.h), one per rank of a
// pipeline group; a step splits the batch into M micro-batches whose activations flow
// forward (stage s to s + 1) and gradients backward. Gradients accumulate over the
// micro-batches, so the step is a single process's with gradient accumulation (batch norm
// per micro-batch, as in GPipe, arXiv 1811.06965). A DDP stage runs every micro-batch under
// no_sync and all-reduces in the step's last backward.
// A stage's sends go out together with its next action's first receive (batch_send_recv:
// one NCCL group): in 1F1B neighbours send to each other at once, and two sends larger
// than NCCL's buffers queued one by one would wait on each other for ever.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "parallel/ddp.h"
#include "parallel/pipeline_schedule.h"
#include "comm/process_group.h"
#include "nn/pipeline_stage.h"

namespace dpt::dist {

// What one step did on this rank, in host wall-clock ms (on CUDA compute_ms counts launches).
struct PipelineStepStats {
  double loss = 0;        // the batch's mean loss (mean of the micro-batches'), on every stage
  double step_ms = 0;     // train_step, from entry to return
  double compute_ms = 0;  // this stage's forwards and backwards (and the loss on the last stage)
  double idle_ms = 0;     // step_ms - compute_ms: waiting for neighbours (the bubble) and messages
  int max_in_flight = 0;  // micro-batches whose activations this stage held at once
};

class Pipeline {
 public:
  // Loss of one micro-batch: a scalar from the last stage's output and the targets' rows.
  using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

  // stage: this rank's nn::PipelineStage, or a DDP over one; group rank r runs stage r.
  // Throws Error when the stage disagrees with the group, or micro_batches < 1.
  Pipeline(nn::ModulePtr stage, GroupPtr group, LossFn loss, PipelineOptions options);

  // One step's forwards and backwards, accumulating into the stage's .grad. Collective over
  // the group (and a DDP stage's). Every stage passes the same batch: `input` [N, ...] (read
  // on the first stage) and `target` (read on the last); throws Error before any message
  // when micro_batches does not divide N.
  PipelineStepStats train_step(const Tensor& input, const Tensor& target);

  const nn::PipelineStage& stage() const { return *stage_; }
  const PipelineOptions& options() const { return options_; }

 private:
  struct MicroBatch;
  void run_forward(MicroBatch& mb, const Tensor& input, const Tensor& target);
  void run_backward(MicroBatch& mb);
  Tensor receive_activation();
  void send_activation(const Tensor& t);
  // Starts the sends queued in outgoing_ together with `receives`; returns the receives' Works.
  std::vector<WorkPtr> exchange(const std::vector<P2POp>& receives);

  nn::ModulePtr module_;                // what forward() is called on (the DDP, if any)
  nn::PipelineStage* stage_ = nullptr;  // inside module_
  DistributedDataParallel* ddp_ = nullptr;
  GroupPtr group_;
  LossFn loss_;
  PipelineOptions options_;
  std::vector<P2POp> outgoing_;  // sends not yet started (see exchange)
  // Sends not yet seen complete, with the tensor each reads (kept alive until then).
  std::deque<std::pair<WorkPtr, Tensor>> sends_;
  double compute_ms_ = 0;
};

}  // namespace dpt::dist
