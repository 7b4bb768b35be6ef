// DDP's buffers (batch-norm running statistics) kept equal on every rank without a blocking
// collective in the step: after each training forward, the buffers are packed into one
// flat buffer (one per dtype; batch norm's are all f32) and broadcast from rank 0 while
// backward runs; at the end of backward (or before the next forward) each rank copies
// rank 0's values in. One round trip a step, off the critical path (a blocking broadcast
// of each tensor before the forward would put one per tensor on it).
#pragma once

#include <vector>

#include "comm/process_group.h"
#include "nn/module.h"

namespace dpt::dist {

class BufferBroadcast {
 public:
  // Collective over `group` (it allocates the flat buffers there), with every rank's
  // buffers in the same order, shapes and dtypes (DDP's parameter check covers the model).
  BufferBroadcast(const nn::NamedTensors& buffers, GroupPtr group);

  // After a training forward on every rank, in the same order as the group's other
  // collectives: packs this rank's buffers and starts the broadcast of rank 0's. Finishes
  // one still pending first.
  void start();
  // Waits for the started broadcast and copies rank 0's values into this rank's buffers,
  // so that every rank holds rank 0's; nothing when none is pending. Rethrows the
  // broadcast's error.
  void finish();

 private:
  struct Flat {
    Tensor flat;
    std::vector<Tensor> buffers, views;  // each buffer and its place in `flat`
  };
  GroupPtr group_;
  std::vector<Flat> flats_;
  std::vector<WorkPtr> pending_;
};

}  // namespace dpt::dist
