// What DistributedDataParallel does, one default per value: the config's distributed
// section holds one (io/config.h takes the defaults from here) and hands it whole to DDP.
#pragma once

#include "comm/hierarchical.h"

namespace dpt::dist {

struct DdpOptions {
  // The gradient buckets' size (the first one's is smaller: reducer.cpp); 0: one bucket per
  // parameter.
  double bucket_cap_mb = 25.0;
  bool find_unused_parameters = false;  // else a parameter without gradient is an error naming it
  bool sync_bn = false;                 // synchronised batch-norm statistics
  // Without sync_bn: after each training forward every rank takes rank 0's buffers
  // (ddp.cpp), so all ranks evaluate with the statistics rank 0 saves.
  bool broadcast_buffers = true;
  // How the gradient buckets cross between hosts (a comm hook: all_reduce_bf16_across_hosts, hierarchical.h); CPU only.
  Compression compress = Compression::none;
  // Reduce-scatter the gradients for a sharded optimizer (zero.h); the buckets then keep
  // their first layout, never rebuilt.
  bool shard_gradients = false;
};

}  // namespace dpt::dist
