// DDP's buffers (batch-norm running statistics) kept equal on every rank off the critical
// path: after each training forward they are packed into one flat buffer per dtype and
// broadcast from rank 0 while backward runs; at its end (or before the next forward) each
// rank copies rank 0's values in.
#pragma once

#include <vector>

#include "comm/process_group.h"
#include "nn/module.h"

namespace dpt::dist {

class BufferBroadcast {
 public:
  // Collective over `group`; every rank's buffers in the same order, shapes and dtypes.
  BufferBroadcast(const nn::NamedTensors& buffers, GroupPtr group);

  // After a training forward, in the group's collective order: finishes a pending
  // broadcast, packs the buffers and starts the broadcast of rank 0's.
  void start();
  // Waits for a started broadcast (rethrowing its error) and copies rank 0's values in.
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
