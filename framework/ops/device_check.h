// The one place ops turn away inputs their kernels cannot take: tensors on different
// devices, on a device without kernels for the op, or of the wrong dtype. What op_device
// returns is the op's dispatch point: the CPU runs backend/cpu, cuda:N runs backend/cuda.
#pragma once

#include <initializer_list>

#include "core/tensor.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/elementwise.h"
#endif

namespace dpt {

// Whether an op has CUDA kernels in a build with the CUDA backend.
enum class CudaKernels { none, available };

// Requires: every tensor defined, f32 and on one device; that device is the CPU, or a
// CUDA device when `cuda` is available and this build has the CUDA backend.
// Ensures: returns that device; else throws an Error naming the op, and the devices or
// the dtype found.
inline Device op_device(const char* op, std::initializer_list<const Tensor*> tensors,
                        CudaKernels cuda = CudaKernels::available) {
  Device device;
  bool first = true;
  for (const Tensor* t : tensors) {
    DPT_CHECK(t->defined()) << op << ": undefined input";
    DPT_CHECK(t->dtype() == DType::f32) << op << ": expected f32, got " << dtype_name(t->dtype());
    Device d = t->device();
    DPT_CHECK(first || d == device) << op << ": inputs on different devices (" << device.str() << " and "
                                    << d.str() << "); move them to one device first";
    device = d;
    first = false;
  }
#ifdef DPT_WITH_CUDA
  bool cuda_here = cuda == CudaKernels::available;
#else
  bool cuda_here = false;
#endif
  DPT_CHECK(device.is_cpu() || cuda_here)
      << op << ": no kernel for " << device.str() << " tensors (" << op << " runs on the CPU only"
      << (cuda == CudaKernels::available ? " in this build, which has no CUDA backend" : "") << ")";
  return device;
}

// For backward functions: the incoming gradient must be f32 on the device the forward ran
// on (a CUDA kernel handed a host pointer would fault and take the CUDA context with it).
inline void check_grad(const char* op, const Tensor& grad, Device device) {
  DPT_CHECK(grad.defined() && grad.dtype() == DType::f32 && grad.device() == device)
      << op << ": expected an f32 gradient on " << device.str() << ", got "
      << (grad.defined() ? std::string(dtype_name(grad.dtype())) + " on " + grad.device().str() : "none");
}

// t itself when contiguous, else a contiguous copy on t's device (Tensor::contiguous()
// copies CPU tensors only).
inline Tensor contiguous_on_device(const Tensor& t) {
#ifdef DPT_WITH_CUDA
  if (t.device().is_cuda()) return cuda::contiguous(t);
#endif
  return t.contiguous();
}

}  // namespace dpt
