// The training loss summed over steps without waiting for the GPU every step: on CUDA the
// running sum stays on the device and is read back only when asked for (once per logging
// interval); on the CPU each step's loss is read at once, as it always was.
#pragma once

#include "core/tensor.h"

namespace dpt::io {

class LossMeter {
 public:
  // Requires a one-element f32 tensor (on any device; one device per meter).
  void add(const Tensor& loss);
  void add(double loss);  // a loss already on the host (a CUDA graph's replay reads it back)
  // The sum of every loss added; on CUDA a read-back that waits for the GPU (see above).
  double sum();

 private:
  double host_sum_ = 0;  // in double, as the CPU loop always summed
  Tensor device_sum_;    // f32 [1] on the device since the last read-back; undefined on the CPU
};

}  // namespace dpt::io
