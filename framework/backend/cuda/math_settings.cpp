// The TF32 and deterministic-convolution settings (see math_settings.h).
#include "backend/cuda/math_settings.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace dpt::cuda {
namespace {

bool environment_says_1(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

std::atomic<bool>& tf32() {
  static std::atomic<bool> enabled{environment_says_1("DPT_CUDA_TF32")};
  return enabled;
}

std::atomic<bool>& deterministic() {
  static std::atomic<bool> enabled{environment_says_1("DPT_CUDNN_DETERMINISTIC")};
  return enabled;
}

}  // namespace

bool tf32_enabled() { return tf32().load(std::memory_order_relaxed); }
void set_tf32_enabled(bool enabled) { tf32().store(enabled, std::memory_order_relaxed); }

bool cudnn_deterministic() { return deterministic().load(std::memory_order_relaxed); }
void set_cudnn_deterministic(bool on) { deterministic().store(on, std::memory_order_relaxed); }

}  // namespace dpt::cuda
