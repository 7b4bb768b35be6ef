// What a forward pass recorded: the op names of the autograd graph behind a tensor, counted,
// for tests that check which ops a model actually ran (a fused op, not its parts).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "core/tensor.h"

namespace dpt::testing {

// Each node reachable from root's grad_fn counted once, by name ("accumulate_grad" for leaves).
inline std::map<std::string, int> graph_node_counts(const Tensor& root) {
  std::map<std::string, int> count;
  std::set<const autograd::Node*> seen;
  std::vector<const autograd::Node*> stack{root.grad_fn().get()};
  while (!stack.empty()) {
    const autograd::Node* node = stack.back();
    stack.pop_back();
    if (!node || !seen.insert(node).second) continue;
    ++count[node->name];
    for (const auto& next : node->next) stack.push_back(next.get());
  }
  return count;
}

}  // namespace dpt::testing
