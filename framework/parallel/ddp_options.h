// What DistributedDataParallel does, as one struct with one default per value. A run's
// config holds one (the distributed section's DDP keys, io/config.h; the schema takes their
// defaults from here) and hands it whole to DDP (data_parallel in train/parallel_plan.cpp,
// the one place a run builds DDP), which hands it to its Reducer.
#pragma once

#include "comm/hierarchical.h"

namespace dpt::dist {

struct DdpOptions {
  // The gradient buckets' size (the first one's is smaller: reducer.cpp); 0: one bucket per
  // parameter.
  double bucket_cap_mb = 25.0;
  bool find_unused_parameters = false;  // else a parameter without gradient is an error naming it
  bool sync_bn = false;                 // synchronised batch-norm statistics
  // Without sync_bn: after each training forward every rank takes rank 0's buffers (one
  // flat broadcast that overlaps backward; buffer_broadcast.h), so all ranks evaluate and
  // checkpoint with the statistics rank 0 saves.
  bool broadcast_buffers = true;
  // How the gradient buckets cross between hosts (a comm hook: all_reduce_bf16_across_hosts, hierarchical.h); CPU only.
  Compression compress = Compression::none;
  // Reduce-scatter the gradients, for a sharded optimizer (zero.h): each rank gets the
  // average of its chunk of each bucket only. The buckets then keep their first layout
  // (never rebuilt), which the shards' owners rely on.
  bool shard_gradients = false;
};

}  // namespace dpt::dist
