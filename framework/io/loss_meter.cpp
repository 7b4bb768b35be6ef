#include "io/loss_meter.h"

#include "autograd/node.h"
#include "ops/elementwise.h"

namespace dpt::io {

void LossMeter::add(const Tensor& loss) {
  DPT_CHECK(loss.numel() == 1) << "LossMeter: expected a one-element loss, got " << shape_str(loss.shape());
  if (loss.device().is_cpu()) {
    host_sum_ += loss.item();
    return;
  }
  autograd::NoGrad no_grad;
  device_sum_ = device_sum_.defined() ? dpt::add(device_sum_, loss.detach()) : loss.detach().clone();
}

void LossMeter::add(double loss) { host_sum_ += loss; }

double LossMeter::sum() {
  if (device_sum_.defined()) {
    host_sum_ += device_sum_.item();
    device_sum_ = Tensor();
  }
  return host_sum_;
}

}  // namespace dpt::io
