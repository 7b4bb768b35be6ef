// The counters form a per-thread stack through outer_: a forward on one thread is never
// counted by a counter on another, so ranks and test threads do not mix their counts.
#include "ops/mac_count.h"

namespace dpt {
namespace {

thread_local MacCounter* innermost = nullptr;

}  // namespace

MacCounter::MacCounter() : outer_(innermost) { innermost = this; }

MacCounter::~MacCounter() { innermost = outer_; }

void mac_count_add(int64_t macs) {
  for (MacCounter* c = innermost; c != nullptr; c = c->outer_) c->total_ += macs;
}

}  // namespace dpt
