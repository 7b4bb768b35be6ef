// Pipeline parallelism: a model cut into S stages (nn/pipeline_stage.h), one per rank of a
// pipeline group; each training step splits the batch into M micro-batches, which flow
// through the stages by point-to-point messages: activations forward (stage s to s + 1),
// their gradients backward (s + 1 to s). Gradients accumulate over the micro-batches and
// the caller makes one optimizer step, so the step is the one a single process makes when
// it runs the same micro-batches one after another with gradient accumulation (batch norm
// normalises each micro-batch, as in GPipe, Huang et al. 2019, arXiv 1811.06965).
// With a DistributedDataParallel stage (DDP over the data-parallel axis of a dp x pp mesh),
// every micro-batch runs under no_sync and only the step's last backward all-reduces.
// A stage's sends wait until its next action starts and go out together with that action's
// first receive (batch_send_recv: one NCCL group on GPUs). In 1F1B, stage s sends activation
// m + 1 and receives gradient m while stage s + 1 sends gradient m and receives activation
// m + 1; queued one by one on each side's NCCL stream, two sends larger than NCCL's buffers
// would wait on each other for ever.
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

struct PipelineOptions {
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::gpipe;
};

// What one step did on this rank. Times are host wall-clock milliseconds (on CUDA the
// kernels run asynchronously: compute_ms then counts their launches).
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

  // stage: this rank's nn::PipelineStage, or a DistributedDataParallel over one. group: the
  // pipeline group; its rank r runs stage r, its size is the stage count. Throws Error when
  // the stage's index or count disagrees with the group, or micro_batches < 1.
  Pipeline(nn::ModulePtr stage, GroupPtr group, LossFn loss, PipelineOptions options);

  // One training step's forwards and backwards: accumulates into the stage's .grad (zero
  // them before, step the optimizer after). Collective over the group (and, for a DDP
  // stage, over its data-parallel group). Every stage passes the same batch: `input` [N, ...]
  // (read on the first stage) and `target` [N, ...] (read on the last); every stage checks
  // that micro_batches divides N and throws Error before any message when it does not.
  // Activations travel as contiguous tensors, each after a small header with its shape.
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
