// The median wall time of `reps` calls of f, in ms, after three untimed calls (which create
// oneDNN primitives and grow the allocators' blocks): a median is what a shared machine
// disturbs least. For the micro-benchmarks in tools/bench/.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

inline double median_ms(const std::function<void()>& f, int reps) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
