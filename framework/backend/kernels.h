// The kernels a device offers: one table per device type, filled by backend/cpu/kernels.cpp
// and backend/cuda/kernels.cpp from the functions kernel_list.h declares in each device's
// namespace, chosen by a tensor's device (kernels_for). Ops, autograd, optimizers and the
// trainer state each rule once and call through this table, so the CPU-only and the CUDA
// build compile the same code above backend/, and the CPU suite runs every rule that is
// not a kernel launch.
//
// Conventions for every entry: tensors are on the table's device; outputs are allocated by
// the caller (unless an entry returns a tensor) and every element of them is written;
// `device` arguments are device indices of the table's type. An entry a device lacks is
// null (the caller turns that into an error naming the device).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"

namespace dpt {

enum class BinaryOp { add, sub, mul, div };

enum class PoolKind {
  max,  // padding never wins (it counts as -inf)
  avg,  // divides by kernel*kernel, padding included (PyTorch's count_include_pad=true)
};

struct PoolParams {
  int64_t kernel = 2;
  int64_t stride = 2;
  int64_t padding = 0;
};

struct ConvParams {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;  // PyTorch convention: 1 means no dilation
  int64_t groups = 1;
  // Activations and their gradients channels-last (NHWC). Given to conv2d_forward: the
  // caller asks for it (Conv2dOptions::channels_last); returned: what the kernels run in.
  bool nhwc = false;
};

// A convolution's forward as it ran: the output, and x and w in the layouts the kernels
// read them (what conv2d_backward is given back).
struct ConvForward {
  Tensor out, x, w;
  ConvParams params;
};

struct BatchNormParams {
  float eps = 1e-5f;
  float momentum = 0.1f;  // running = (1 - momentum) running + momentum batch
  bool training = true;   // batch statistics (and a running update); else the given ones
  bool relu = false;      // out = max(0, bn(x))
};

// What a batch norm forward keeps for its backward; the backend's forward fills what its
// backward reads. mean/stat: training, the batch mean and the backend's second statistic;
// eval, snapshots of the running mean and variance (the caller sets those).
struct BatchNormSaved {
  Tensor x, weight, bias, mean, stat, out, workspace;
  BatchNormParams params;
};

// What a pooling forward keeps for its backward (the backend's choice: the input and the
// output, or an argmax workspace).
struct PoolSaved {
  Tensor x, out, workspace;
};

// One parameter of a fused optimizer update: n contiguous f32 elements each.
struct SgdSlot {
  float* weight;
  const float* grad;
  float* velocity;  // unused when momentum == 0
  int64_t n;
};

struct AdamWSlot {
  float* weight;
  const float* grad;
  float* m;
  float* v;
  int64_t n;
};

struct FiniteSlot {
  const float* x;
  int64_t n;
};

// Host bytes copied to a device without stalling the host, ordered before the work queued
// after the copy (backend/cuda/batch_upload.h).
class Upload {
 public:
  virtual ~Upload() = default;
  // Requires bytes <= the capacity it was made with; dst in the device's memory.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
};

// A step run eagerly `warmup` times, then captured once and replayed (backend/cuda/graph.h).
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  virtual void run() = 0;
  virtual bool graphed() const = 0;
  virtual size_t node_count() const = 0;  // what a replay launches; 0 before the capture
};

// The data loader's batches copied to a device while the step before still runs
// (backend/cuda/batch_upload.h).
class BatchUploader {
 public:
  virtual ~BatchUploader() = default;
  virtual void start(const std::vector<Tensor>& host) = 0;  // requires nothing pending
  virtual bool pending() const = 0;
  virtual std::vector<Tensor> take() = 0;  // the started tensors, on the device
  virtual void drop() = 0;                 // forgets a pending batch
};

struct Kernels {
  const char* name;  // "CPU", "CUDA": for messages
  bool bf16;         // takes bf16 activations and weights (mixed precision, nn/compute.h)

  // --- the device itself
  // A CUDA graph capture is recording on `device`: nothing may read back or copy from the host.
  bool (*capturing)(int device);
  // dst = src of one shape, any strides on either side, converting f32 <-> bf16.
  void (*copy)(const Tensor& src, const Tensor& dst);
  // Staging for uploads of up to `capacity` bytes to `device`.
  std::unique_ptr<Upload> (*upload_make)(size_t capacity, int device);
  // null where batches need no staging (the CPU: the loader's tensors are used as they are).
  std::unique_ptr<BatchUploader> (*batch_uploader_make)(int device);
  // null where there are no graphs (the CPU).
  std::unique_ptr<StepGraph> (*step_graph_make)(int device, int warmup, std::function<void()> step);

  // --- the kernels (kernel_list.h): one function pointer each
#define DPT_KERNEL(ret, name, params) ret(*name) params;
#include "backend/kernel_list.h"
};

// Registers `device`'s table (backend/cuda does at load time). Never called for the CPU.
void kernels_register(DeviceType type, const Kernels* kernels);
// The table for `device`'s type. Throws dpt::Error naming the device when none is
// registered (a CUDA tensor in a build without the CUDA backend).
const Kernels& kernels_for(Device device);

}  // namespace dpt
