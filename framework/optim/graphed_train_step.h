// One training step (forward, cross-entropy, backward with DDP's all-reduces, update, EMA)
// run eagerly for a few warm-up steps, then captured as a CUDA graph and replayed
// (cuda_graphs; docs/gpu.md). The batch goes into static buffers and the step's values are
// uploaded before each replay; the loss and the non-finite verdict are read back after.
#pragma once

#include <memory>
#include <vector>

#include "backend/kernels.h"
#include "core/tensor.h"
#include "nn/module.h"
#include "optim/ema.h"
#include "optim/optimizer.h"

namespace dpt::optim {

struct GraphedTrainOptions {
  int warmup = 3;  // eager steps before the capture (>= 1)
  float label_smoothing = 0.0f;
  int64_t classes = 0;      // labels must lie in [0, classes)
  bool check_loss = false;  // the loss counts in `finite` too (one rank: train's rule)
};

struct GraphedStepResult {
  float loss = 0.0f;
  bool finite = true;  // every gradient (after DDP's all-reduce), and the loss if check_loss
};

class GraphedTrainStep {
 public:
  // `model` is what the step calls (DDP or the bare model), `net` the bare model (its
  // gradients, EMA); `ema` may be null. Requires: net's parameters on one device whose
  // kernels capture graphs (CUDA; dpt::Error otherwise, naming the device).
  // `images_shape` is the batch shape of every step.
  GraphedTrainStep(nn::Module& model, const nn::Module& net, Optimizer& optimizer, Ema* ema,
                   Shape images_shape, GraphedTrainOptions options);
  GraphedTrainStep(const GraphedTrainStep&) = delete;
  GraphedTrainStep& operator=(const GraphedTrainStep&) = delete;

  // Runs the step on the batch (host or device) at `lr` and waits for its loss and verdict.
  // The update is applied whatever the verdict (a graph cannot branch): the caller stops on
  // a non-finite step. Requires images of images_shape, labels [N] i64 in [0, classes).
  GraphedStepResult run(const Tensor& images, const Tensor& labels, float lr);
  bool graphed() const { return step_->graphed(); }
  // Nodes one replay launches (0 before the capture).
  size_t graph_nodes() const { return step_->node_count(); }

 private:
  void body();  // the captured part: device work only

  nn::Module& model_;
  const nn::Module& net_;
  Optimizer& optimizer_;
  Ema* ema_;
  GraphedTrainOptions options_;
  Device device_;
  Tensor images_, labels_;  // static inputs
  Tensor ones_;             // backward's seed, made before the capture
  Tensor result_;           // [loss, 1 if anything was not finite]
  std::vector<Tensor> params_;
  std::unique_ptr<Upload> images_upload_, labels_upload_;
  std::unique_ptr<StepGraph> step_;
};

}  // namespace dpt::optim
