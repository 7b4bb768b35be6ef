// CUDA graphs: the work a step queues on a device's compute stream (and on the streams it
// forks from there, such as NCCL's communication stream) is captured once and then
// replayed with one launch, so a small model's step no longer pays a host launch for each
// of its hundreds of kernels.
//
// What a captured step must respect (checked where it can be, with a clear dpt::Error):
// - no host synchronisation, read-back or copy from host memory inside it (the values that
//   change per step are uploaded into device buffers before each replay: batch_upload.h);
// - no data-dependent host control flow: the host code runs once, at capture;
// - the same shapes and the same tensors every replay: inputs are copied into static
//   buffers, and outputs (the loss) are read from the tensors the capture produced;
// - libraries set up before capture: warm-up steps run eagerly first, so cuDNN plans,
//   cuBLAS handles and DDP's rebuilt buckets exist before capture.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "backend/kernels.h"

namespace dpt::cuda {

// True while a graph capture is in progress on `device`'s compute stream. Code that would
// synchronise with the device or copy from the host checks this and throws instead of
// invalidating the capture.
bool capture_active(int device);

// One captured graph and the private memory pool its capture allocated from.
class Graph {
 public:
  explicit Graph(int device);
  // Destroys the executable graph (a replay in flight completes first, on the GPU), then
  // hands the pool back to the device's shared cache.
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Requires: not captured yet, no capture in progress on the device. Waits for the
  // device's queued work, then runs `body` with the compute stream in capture mode
  // cudaStreamCaptureModeThreadLocal (a call on this thread that capture forbids, such as a
  // synchronisation, fails at once; other threads, like the data loader's, are not
  // affected) and every allocation on the device served from this graph's pool. The body's
  // work is recorded, not run. On failure (an exception from `body` or an invalid capture)
  // the capture is ended and dropped and a dpt::Error says so.
  void capture(const std::function<void()>& body);
  // Queues the captured work on the compute stream. Requires capture() done.
  void replay();
  bool captured() const { return exec_ != nullptr; }
  // Nodes (kernels, copies, memsets, event waits) the graph holds: what one replay launches.
  size_t node_count() const { return nodes_; }
  int device() const { return device_; }

 private:
  int device_;
  uint64_t pool_;
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
};

// A step run eagerly for its first `warmup` calls (>= 1: libraries and DDP settle there),
// captured on the next one — which then runs through its first replay — and replayed on
// every call after. The caller uploads the step's inputs and scalars before each run().
class GraphedStep final : public StepGraph {
 public:
  GraphedStep(int device, int warmup, std::function<void()> step);
  void run() override;
  bool graphed() const override { return graph_.captured(); }
  size_t node_count() const override { return graph_.node_count(); }
  int64_t calls() const { return calls_; }
  const Graph& graph() const { return graph_; }

 private:
  int warmup_;
  std::function<void()> step_;
  Graph graph_;
  int64_t calls_ = 0;
};

}  // namespace dpt::cuda
