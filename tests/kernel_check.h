// Shared by the tests of the oneDNN-backed kernels: outputs poisoned before a kernel runs
// (so one that writes nothing cannot pass), and comparison with a plain-loop reference
// computed in double, within atol + rtol * |ref|.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dpt::testing {

// An uninitialised tensor filled with NaN: any element the kernel forgets fails.
inline Tensor poisoned(const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  t.fill_(std::numeric_limits<float>::quiet_NaN());
  return t;
}

inline std::vector<double> to_double(const Tensor& t) {
  std::vector<float> v = t.to_vector();
  return std::vector<double>(v.begin(), v.end());
}

inline void expect_close(const Tensor& got, const std::vector<double>& ref, const std::string& what,
                         double atol = 1e-4, double rtol = 1e-4) {
  std::vector<float> v = got.to_vector();
  ASSERT_EQ(v.size(), ref.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    double tol = atol + rtol * std::abs(ref[i]);
    bool ok = std::abs(v[i] - ref[i]) <= tol;  // false for NaN
    if (!ok && reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << " is " << v[i] << ", expected " << ref[i];
  }
  EXPECT_EQ(reported, 0) << what << ": " << reported << " of " << v.size() << " elements out of tolerance";
}

}  // namespace dpt::testing
