// Multiply-accumulate counting for model summaries ("ResNet-20: 40.6M MACs per image"):
// conv2d and linear report each forward's MACs to the counters alive on their thread.
// With no counter alive, reporting is one thread-local load and a branch. The counters
// form a per-thread stack through outer_: a forward on one thread is never counted by a
// counter on another, so ranks and test threads do not mix their counts.
#pragma once

#include <cstdint>

namespace dpt {

// Counts the MACs of the conv2d and linear forwards this thread runs while it is alive
// (MacCounter c; model(x); c.total()); nothing else is counted. Counters nest, scoped.
class MacCounter {
 public:
  MacCounter() : outer_(innermost()) { innermost() = this; }
  ~MacCounter() { innermost() = outer_; }
  MacCounter(const MacCounter&) = delete;
  MacCounter& operator=(const MacCounter&) = delete;
  int64_t total() const { return total_; }

  // Adds `macs` to every counter alive on this thread; does nothing when there is none.
  static void add(int64_t macs) {
    for (MacCounter* c = innermost(); c != nullptr; c = c->outer_) c->total_ += macs;
  }

 private:
  static MacCounter*& innermost() {
    thread_local MacCounter* counter = nullptr;
    return counter;
  }
  MacCounter* outer_;
  int64_t total_ = 0;
};

}  // namespace dpt
