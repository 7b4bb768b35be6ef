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
//   group split(color 0)[0,2]: 2 ranks
//     world rank  0  2
//     group rank  0  1
// The groups are those alive on any rank (a rank lists only groups it is a member of), world
// first, then in the order rank 0, 1, ... made them. Long lists end with "... (N more)".
// requires: dist::init().
std::string world_table(const std::string& device);

}  // namespace dpt::dist
