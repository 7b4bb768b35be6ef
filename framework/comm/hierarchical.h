// The all-reduce of a group whose ranks span several hosts, built from sub-groups: reduce-
// scatter within each host (each local rank owns 1/P of the tensor), all-reduce each share
// across hosts among the ranks of one local index (as bf16 if asked: half the bytes, summed
// in f32), all-gather within each host. Across hosts the link is the limit: this way each
// byte crosses it once per host, in P parallel streams.
#pragma once

#include <memory>
#include <string>

#include "comm/process_group.h"

namespace dpt::dist {

// distributed.hierarchical: automatic uses the hierarchical all-reduce when the group spans
// more than one host and a host holds more than one of its ranks.
enum class Hierarchical { automatic, on, off };
// distributed.compress: how DDP's gradient buckets cross between hosts.
enum class Compression { none, bf16 };

// The sub-groups of a group that spans hosts, every host holding P of its ranks: `host`, the
// group's ranks on this rank's host (null when P == 1); `across`, one rank per host, those
// with this rank's local index (in group-rank order on each host). Both ordered by group rank.
struct HostGroups {
  GroupPtr host, across;
};

// One hierarchical all-reduce of `t`, a stage machine that the parent group's poll token's
// holder advances (CommTask::progress), each stage a collective of `host` or `across`:
//   1. host->reduce_scatter: this rank's share, chunk_of(n, P, local rank), summed over its
//      host (for min/max: reduced) in f32;
//   2. across->all_to_all of the share as the wire dtype (bf16 when compressed: rounded to
//      nearest even, once, here), so that host h's rank receives block h of every host's share;
//   3. each rank sums (reduces) its block over the hosts in host order in f32 (avg: then
//      divides by the group size), converts the result to the wire dtype (bf16: the second
//      and last rounding) and across->all_gather's it; every rank widens what it gets;
//   4. host->all_gather of the shares into `t`.
// Each element's final value is computed once, by one rank, then copied, so every rank of
// the group ends with the same bits. Compression applies to f32 sum and avg only.
class HierarchicalAllReduce {
 public:
  // requires: t contiguous, f32 or i64, on the CPU, the same numel on every rank; bf16 only
  // for f32 sum and avg; group_size: the parent group's size (avg's divisor).
  HierarchicalAllReduce(const HostGroups& groups, const Tensor& t, ReduceOp op, bool bf16, int group_size);
  // Posts the next stage when the current one is complete; true once all are. Never blocks.
  // Throws the stage's Error (naming the sub-group and its collective).
  bool progress();
  // The stage in flight, for timeout messages: "; in stage 2 of 4 (all_to_all ... on world.across[0,2])".
  std::string stage_text() const;

 private:
  void post_exchange();  // stage 2
  void post_gather();    // stage 3, after combining the blocks

  HostGroups groups_;
  Tensor t_, share_, wire_, blocks_, mine_, gathered_;
  ReduceOp op_;
  DType wire_dtype_;
  int group_size_;
  int stage_ = 0;  // the stage in flight (1..4), 0 before the first, 5 when done
  WorkPtr work_;
};

// DDP's distributed.compress: bf16, as a Reducer comm hook (reducer.h): bucket = the average
// (`op`) over `group`, through its host groups with bf16 on the wire between hosts (the
// hierarchical all-reduce above), queued, numbered and recorded with the group's other
// collectives. Only f32 sum and avg are compressed; anything else, or a group without host
// groups (one host), is the group's all_reduce. requires: `group` made by dist.
WorkPtr all_reduce_bf16_across_hosts(ProcessGroup& group, const Tensor& bucket, ReduceOp op = ReduceOp::avg);

}  // namespace dpt::dist
