// The one place ops turn away inputs their kernels cannot take yet: a tensor on a device
// without kernels for this op, or of the wrong dtype.
#pragma once

#include <initializer_list>

#include "core/tensor.h"

namespace dpt {

// Requires every tensor to be a defined f32 CPU tensor; else an Error naming the op.
inline void check_cpu_f32(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    DPT_CHECK(t->defined()) << op << ": undefined input";
    DPT_CHECK(t->device().is_cpu()) << op << ": no kernel for " << t->device().str()
                                    << " tensors in this build (CUDA kernels come with the CUDA backend)";
    DPT_CHECK(t->dtype() == DType::f32) << op << ": expected f32, got " << dtype_name(t->dtype());
  }
}

}  // namespace dpt
