// The kernel tables by device type: the CPU's is always there; CUDA's registers itself
// when libdpt is built with it (backend/cuda/kernels.cpp).
#include "backend/kernels.h"

#include "backend/cpu/kernels.h"

namespace dpt {
namespace {

const Kernels* g_tables[2] = {nullptr, nullptr};  // by DeviceType

}  // namespace

void kernels_register(DeviceType type, const Kernels* kernels) { g_tables[static_cast<int>(type)] = kernels; }

const Kernels& kernels_for(Device device) {
  if (device.is_cpu()) return cpu::kernels();
  const Kernels* table = g_tables[static_cast<int>(device.type)];
  DPT_CHECK(table)
      << "a tensor on " << device.str()
      << ", but this build of dpt has no CUDA backend (configure with -DDPT_CUDA=ON on a machine "
         "with the CUDA toolkit, cuDNN and NCCL)";
  return *table;
}

}  // namespace dpt
