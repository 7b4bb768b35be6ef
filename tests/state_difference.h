// Comparing two lists of named tensors (state_dict(), named_parameters(), gradients) bit for
// bit, with a message that names the first difference.
#pragma once

#include <string>

#include "nn/module.h"

namespace dpt::testing {

// "" when a and b hold the same names in the same order with bit-identical values, else the
// first difference.
inline std::string state_difference(const nn::NamedTensors& a, const nn::NamedTensors& b) {
  if (a.size() != b.size()) return std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " tensors";
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) return "'" + a[i].first + "' vs '" + b[i].first + "'";
    if (a[i].second.to_vector() != b[i].second.to_vector()) return "'" + a[i].first + "' differs";
  }
  return "";
}

}  // namespace dpt::testing
