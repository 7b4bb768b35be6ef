// Rank-dependent inputs and closed-form checks for the collective tests under mpirun
// (test_mpi_*.cpp): a 1-D tensor whose element i is value(i), and a check of every element
// that reports the first one that differs (one failure per tensor at most).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace dpt::testing {

template <class T, class F>
Tensor make(int64_t n, F value) {
  Tensor t = Tensor::empty({n}, dtype_of<T>());
  T* p = t.data<T>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(value(i));
  return t;
}

template <class T, class F>
void expect_values(const Tensor& t, F expected, const std::string& what) {
  const T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    T want = static_cast<T>(expected(i));
    if (p[i] != want) {
      ADD_FAILURE() << what << ": element " << i << " of " << t.numel() << " is " << p[i] << ", expected "
                    << want;
      return;
    }
  }
}

}  // namespace dpt::testing
