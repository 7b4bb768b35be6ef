// Whether a step's update may be applied. After DDP's all-reduce every rank holds the same
// gradients, so "all finite?" has one answer without communication (a sharded optimizer's
// shards are combined: Optimizer::all_ranks). The loss, which differs by rank, counts only
// on one rank; a non-finite loss makes its gradients non-finite anyway.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace dpt::optim {

// True when every defined .grad of `params` holds only finite values (f32).
bool gradients_finite(const std::vector<Tensor>& params);

class NonfiniteGuard {
 public:
  // `model` is the bare model; `keep_buffers` (skip mode) saves its buffers before each
  // forward pass so that a skipped step leaves the batch-norm statistics as they were.
  // The gradients checked are those `optimizer`'s step reads (Optimizer::step_gradients).
  NonfiniteGuard(const nn::Module& model, const Optimizer& optimizer, bool keep_buffers, bool check_loss);
  void before_forward();
  // After backward (and DDP's all-reduce): true if the step may be applied, the same on
  // every rank (collective for a sharded optimizer). When false and keep_buffers, the
  // buffers are back to what they were before the forward pass.
  bool step_finite(const Tensor& loss);

 private:
  const Optimizer& optimizer_;
  nn::NamedTensors buffers_;
  nn::NamedTensors saved_;  // with keep_buffers: the buffers before the forward pass; else empty
  bool check_loss_;
};

}  // namespace dpt::optim
