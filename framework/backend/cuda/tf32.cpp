// The TF32 setting (see tf32.h): read from the environment once, overridable.
#include "backend/cuda/tf32.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace dpt::cuda {
namespace {

std::atomic<bool>& setting() {
  static std::atomic<bool> enabled{[] {
    const char* value = std::getenv("DPT_CUDA_TF32");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }()};
  return enabled;
}

}  // namespace

bool tf32_enabled() { return setting().load(std::memory_order_relaxed); }
void set_tf32_enabled(bool enabled) { setting().store(enabled, std::memory_order_relaxed); }

}  // namespace dpt::cuda
