// Graph and GraphedStep (see graph.h). The capture's memory comes from a private pool of
// the caching allocator; streams forked from the compute stream inside the capture (NCCL's,
// through an event the compute stream records and the other stream waits on) must join it
// again before the capture ends, which every Work::wait() of a collective does.
#include "backend/cuda/graph.h"

#include <exception>
#include <string>

#include "backend/cuda/allocator.h"
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device.h"
#include "core/error.h"

namespace dpt::cuda {

bool capture_active(int device) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(compute_stream(device), &status));
  return status != cudaStreamCaptureStatusNone;
}

Graph::Graph(int device) : device_(device), pool_(allocator_pool_create(device)) {}

Graph::~Graph() {
  // Never throws: a graph may go while an error unwinds the training loop.
  try {
    DeviceGuard guard(device_);
    if (exec_) (void)cudaGraphExecDestroy(exec_);  // an in-flight replay is freed when it completes
    allocator_pool_release(device_, pool_);
  } catch (...) {
  }
}

void Graph::capture(const std::function<void()>& body) {
  DPT_CHECK(!exec_) << "CUDA graph on cuda:" << device_ << ": already captured";
  DeviceGuard guard(device_);
  DPT_CHECK(!capture_active(device_))
      << "CUDA graph on cuda:" << device_ << ": another capture is in progress on this device";
  cudaStream_t stream = compute_stream(device_);
  // Eager work finishes first, so nothing queued before the capture is still running when
  // the capture's first replay reuses memory that eager code freed.
  cuda_synchronize(device_);
  allocator_capture_begin(device_, pool_);
  cudaError_t begin = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (begin != cudaSuccess) {
    allocator_capture_end(device_);
    CUDA_CHECK(begin);
  }
  std::string failure;
  try {
    body();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  cudaGraph_t graph = nullptr;
  cudaError_t end = cudaStreamEndCapture(stream, &graph);
  allocator_capture_end(device_);
  if (failure.empty() && end != cudaSuccess)
    failure =
        std::string(cudaGetErrorString(end)) +
        " (a call inside the step could not be captured: a host synchronisation or read-back, a copy from "
        "pageable host memory, an event query; or a stream forked from the compute stream was not joined "
        "back)";
  if (!failure.empty()) {
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // the capture's error is reported here, not by the next CUDA call
    DPT_FAIL() << "CUDA graph capture on cuda:" << device_ << " failed: " << failure;
  }
  cudaError_t status = cudaGraphGetNodes(graph, nullptr, &nodes_);
  if (status == cudaSuccess) status = cudaGraphInstantiate(&exec_, graph, 0);
  (void)cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  if (status != cudaSuccess) exec_ = nullptr;
  CUDA_CHECK(status);
  // Sets the graph up on the device now rather than in the first replay.
  CUDA_CHECK(cudaGraphUpload(exec_, stream));
}

void Graph::replay() {
  DPT_CHECK(exec_) << "CUDA graph on cuda:" << device_ << ": replay before capture";
  DeviceGuard guard(device_);
  CUDA_CHECK(cudaGraphLaunch(exec_, compute_stream(device_)));
}

GraphedStep::GraphedStep(int device, int warmup, std::function<void()> step)
    : warmup_(warmup), step_(std::move(step)), graph_(device) {
  DPT_CHECK(warmup >= 1) << "CUDA graphs: at least one eager warm-up step is needed before capture (cuDNN "
                            "plans, cuBLAS handles and DDP's buckets are made there), got "
                         << warmup;
}

void GraphedStep::run() {
  if (calls_ < warmup_) {
    step_();
  } else {
    if (!graph_.captured()) graph_.capture(step_);
    graph_.replay();
  }
  ++calls_;
}

}  // namespace dpt::cuda
