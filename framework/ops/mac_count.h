// Multiply-accumulate counting for model summaries ("ResNet-20: 40.6M MACs per image"):
// conv2d and linear report each forward's MACs to the counters alive on their thread.
// With no counter alive, reporting is one thread-local load and a branch.
#pragma once

#include <cstdint>

namespace dpt {

// Counts the MACs of the conv2d and linear forwards this thread runs while it is alive
// (MacCounter c; model(x); c.total()); nothing else is counted. Counters nest, scoped.
class MacCounter {
 public:
  MacCounter();
  ~MacCounter();
  MacCounter(const MacCounter&) = delete;
  MacCounter& operator=(const MacCounter&) = delete;
  int64_t total() const { return total_; }

 private:
  friend void mac_count_add(int64_t macs);
  MacCounter* outer_;
  int64_t total_ = 0;
};

// Adds `macs` to every counter alive on this thread; does nothing when there is none.
void mac_count_add(int64_t macs);

}  // namespace dpt
