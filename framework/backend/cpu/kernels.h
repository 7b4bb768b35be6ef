// The CPU's kernel table (backend/kernels.h): oneDNN primitives and plain loops.
#pragma once

#include "backend/kernels.h"

namespace dpt::cpu {

const Kernels& kernels();

}  // namespace dpt::cpu
