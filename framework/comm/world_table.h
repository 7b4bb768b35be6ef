// The world as rank 0 prints it at start-up: where every rank runs (host, node, local rank,
// device) and every process group with its members and their group-relative ranks, so that a
// run across hosts shows where each rank landed and how its groups line up before it trains.
#pragma once

#include <string>

namespace dpt::dist {

// Collective over the world: every rank calls it once, on the thread that makes groups.
// `device`: this rank's device ("cpu", "cuda:0"). Returns the text on rank 0, "" elsewhere:
//   world: 4 ranks on 2 hosts
//     rank  host     node  local rank  device
//        0  dpt1-n0     0           0  cpu
//        ...
//   group world: 4 ranks; hierarchical all-reduce: 2 hosts x 2 ranks
//     world rank  0  1  2  3
//     group rank  0  1  2  3
//     host groups: world.host[0,1] world.host[2,3]
//     across groups: world.across[0,2] world.across[1,3]
//   group split(color 0)[0,2]: 2 ranks; flat all-reduce: 2 hosts x 1 rank
//     world rank  0  2
//     group rank  0  1
//     across groups: split(color 0)[0,2].across[0,2]
// The groups are those alive on any rank (a rank lists only groups it is a member of), world
// first, then in the order rank 0, 1, ... made them; a group that spans hosts says how its
// all_reduce runs and lists its host groups (MpiProcessGroup::make_host_groups: names with
// the members' world ranks in group-rank order). Long lists end with "... (N more)".
// requires: dist::init().
std::string world_table(const std::string& device);

}  // namespace dpt::dist
