// The tape. Each op whose output needs a gradient records one Node: the nodes its inputs'
// gradients flow to, and a function from the output's gradient to the inputs' gradients.
// Leaves get an accumulator node that adds into .grad and then fires the leaf's
// post-accumulate hooks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dpt::autograd {

// Returns one gradient per input, in input order; an undefined Tensor where the input
// needs none. Activation gradients are written fresh; the engine sums them.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

struct Node {
  std::string name;                        // op name, for error messages
  uint64_t sequence_nr = 0;                // creation order: backward runs the newest first
  std::vector<std::shared_ptr<Node>> next;  // per input; null where no gradient is needed
  BackwardFn backward;                     // cleared after it runs, freeing saved tensors
  bool reusable = false;                   // leaf accumulators outlive one backward pass
  // An op's output's dtype and device: its incoming gradient must have them (the engine
  // checks, so no kernel is handed a host pointer or another dtype). Unused for leaves.
  DType dtype = DType::f32;
  Device device;
};

// True unless a NoGrad guard is active on this thread.
bool grad_enabled();

// Disables recording on this thread while alive (evaluation, optimizer updates).
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

// True when recording is on and some input requires a gradient.
bool needs_recording(const std::vector<Tensor>& inputs);

// Records `output = name(inputs)` when needs_recording(inputs); otherwise does nothing.
// `backward` must return inputs.size() gradients; it is handed only gradients of output's
// dtype on output's device (any other is an Error naming "<name> backward").
void record(const char* name, const Tensor& output, const std::vector<Tensor>& inputs, BackwardFn backward);

// Adds a hook run after the leaf's .grad has received this backward pass's gradient.
void add_post_accumulate_hook(const Tensor& leaf, PostAccumulateHook hook);

// Runs backward from `root`; grad_output undefined means ones (root must be a scalar).
void backward(const Tensor& root, const Tensor& grad_output);

// Watches the nodes the backward engine runs, for profiling (profile/timeline.h). Called on
// the thread running backward, around each node's backward function; `grad` is the
// gradient flowing into the node (for an accumulate_grad node: the parameter's gradient).
class NodeObserver {
 public:
  virtual ~NodeObserver() = default;
  virtual void node_started(const Node& node, const Tensor& grad) = 0;
  virtual void node_finished(const Node& node, const Tensor& grad) = 0;
};

// Installs `observer` for backward passes on this thread; nullptr (the default) removes it,
// and then the engine pays one branch per node. Returns the observer it replaces.
NodeObserver* set_node_observer(NodeObserver* observer);

// Runs `callback` once when the backward pass now running on this thread ends, in the
// order queued: with failed = false when every node has run (DDP waits for its last
// all-reduces there), with failed = true when a node (or an earlier callback) threw, before
// that error leaves backward(); an error a callback throws then is dropped for the first
// one. Requires a backward in progress.
void queue_callback(std::function<void(bool failed)> callback);

}  // namespace dpt::autograd
