// Which device each rank trains on: train's `device: auto | cpu | cuda`. A rank takes
// cuda:(local rank % the devices it sees), as PyTorch's launchers do; the ranks compare
// the GPUs they would use (by UUID, so CUDA_VISIBLE_DEVICES renumbering is no problem)
// because NCCL refuses a group with two ranks on one GPU ("Duplicate GPU detected").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"

namespace dpt::dist {

// The `device` key: where the ranks train.
enum class DeviceSetting { automatic, cpu, cuda };

// What one rank sees, as the ranks exchange it.
struct RankView {
  int64_t device_count = 0;                 // CUDA devices visible to the rank
  int64_t device_index = -1;                // the one it would use, -1 without any
  std::array<unsigned char, 16> uuid = {};  // that device's UUID
};

struct DeviceChoice {
  Device device = Device::cpu();
  // One line for rank 0 to print: the setting, what it resolved to and why, and which
  // device each rank uses.
  std::string note;
};

// The decision, the same on every rank given every rank's view (indexed by world rank):
//   cpu:  the CPU.
//   cuda: views[rank]'s device; throws Error (one line) when a rank sees no device or
//         two ranks would share a GPU.
//   auto: cuda when every rank sees a device and no two share one, and not
//         `deterministic` (bit-for-bit runs are a CPU guarantee); else the CPU, the note
//         saying why.
// `reason`: why this rank sees no device (for the note and the error).
DeviceChoice device_choose(DeviceSetting setting, bool deterministic, const std::vector<RankView>& views,
                           int rank, const std::string& reason);

// Collective over the world for auto and cuda (every rank calls it once at start-up; cpu
// needs no communication and touches no driver). Throws Error for `device: cuda` on a
// rank without a device, naming its reason. Makes the chosen CUDA device current.
DeviceChoice rank_device_select(DeviceSetting setting, bool deterministic);

}  // namespace dpt::dist
