// Rank-dependent inputs and their closed-form checks, shared by the collective tests
// (flashlight's AllReduceTest): rank r's input is a simple function of (r, i); the result
// is worked out in closed form and every element is checked (values stay exact in f32).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/tensor.h"

namespace dpt::testing {

// A 1-D tensor of n elements of type T, element i = value(i).
template <class T, class F>
Tensor make(int64_t n, F value) {
  Tensor t = Tensor::empty({n}, dtype_of<T>());
  T* p = t.data<T>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(value(i));
  return t;
}

// One failure per tensor at most: the first element that differs from expected(i).
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
