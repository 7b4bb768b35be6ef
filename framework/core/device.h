// Where a tensor's bytes live. A tensor carries its device; there is no process-wide mode.
#pragma once

#include <string>

namespace dpt {

enum class DeviceType { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index) { return {DeviceType::cuda, index}; }
  // Parses "cpu", "cuda" or "cuda:N"; throws Error otherwise.
  static Device parse(const std::string& text);

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;
  bool operator==(const Device&) const = default;
};

}  // namespace dpt
