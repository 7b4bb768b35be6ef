#include "optim/graphed_train_step.h"

#include "autograd/node.h"
#include "core/error.h"
#include "core/storage.h"
#include "ops/device_check.h"
#include "ops/loss.h"

namespace dpt::optim {

GraphedTrainStep::GraphedTrainStep(nn::Module& model, const nn::Module& net, Optimizer& optimizer, Ema* ema,
                                   Shape images_shape, GraphedTrainOptions options)
    : model_(model),
      net_(net),
      optimizer_(optimizer),
      ema_(ema),
      options_(options),
      params_(net.parameters()) {
  DPT_CHECK(!params_.empty()) << "cuda_graphs: the model has no parameters";
  const Device device = params_.front().device();
  for (const Tensor& p : params_)
    DPT_CHECK(p.device() == device) << "cuda_graphs: needs the model on one device, parameters are on "
                                    << device.str() << " and " << p.device().str();
  const Kernels& k = kernels_for(device);
  DPT_CHECK(k.step_graph_make) << "cuda_graphs: the model is on " << device.str()
                               << ", which has no graphs (train on a CUDA device, or set cuda_graphs: false)";
  DPT_CHECK(images_shape.size() >= 1 && images_shape[0] > 0)
      << "cuda_graphs: images shape " << shape_str(images_shape) << " has no batch dimension";
  DPT_CHECK(options.classes > 0) << "cuda_graphs: the number of classes must be given";
  device_ = device;
  images_ = Tensor::zeros(images_shape, DType::f32, device);
  labels_ = Tensor::zeros({images_shape[0]}, DType::i64, device);
  ones_ = Tensor::full({}, 1.0f).to(device);
  result_ = Tensor::zeros({2}, DType::f32, device);
  images_upload_ = k.upload_make(images_.numel() * sizeof(float), device.index);
  labels_upload_ = k.upload_make(labels_.numel() * sizeof(int64_t), device.index);
  step_ = k.step_graph_make(device.index, options.warmup, [this] { body(); });
}

GraphedStepResult GraphedTrainStep::run(const Tensor& images, const Tensor& labels, float lr) {
  DPT_CHECK(images.shape() == images_.shape() && images.dtype() == DType::f32)
      << "cuda_graphs: a batch of f32 images " << shape_str(images.shape()) << ", the captured step takes "
      << shape_str(images_.shape())
      << " (a graph replays one shape; the training loader drops the last partial "
      << "batch)";
  DPT_CHECK(labels.dtype() == DType::i64 && labels.shape() == labels_.shape())
      << "cuda_graphs: expected i64 labels " << shape_str(labels_.shape()) << ", got "
      << dtype_name(labels.dtype()) << " " << shape_str(labels.shape());
  // The loss's label check, here before the replay (inside the graph it cannot read back):
  // on the batch's device, then copied or uploaded into the static buffers.
  Tensor checked = labels.device() == device_ ? contiguous_on_device(labels) : labels.contiguous();
  int64_t label = 0;
  const int64_t row = kernels_for(checked.device()).first_bad_label(checked, options_.classes, &label);
  DPT_CHECK(row < 0) << "cross_entropy: label " << label << " at row " << row << " is outside [0, "
                     << options_.classes << ")";
  if (checked.device() == device_)
    labels_.copy_from(checked);
  else
    labels_upload_->copy(labels_.raw_data(), checked.raw_data(), checked.numel() * sizeof(int64_t));
  if (images.device() == device_) {
    images_.copy_from(images);  // on the device: queued, no wait
  } else {
    Tensor src = images.contiguous();
    images_upload_->copy(images_.raw_data(), src.raw_data(), src.numel() * sizeof(float));
  }
  optimizer_.step_prepare(lr);
  if (ema_) ema_->update_prepare();
  step_->run();
  // A replay skips the host code that marks the parameters written: mark them here, so
  // that cached copies (nn/compute.h) are remade.
  for (const Tensor& p : params_) p.storage()->bump_version();
  float host[2] = {0.0f, 0.0f};
  copy_bytes(host, Device::cpu(), result_.raw_data(), result_.device(), sizeof host);  // waits for the step
  return {host[0], host[1] == 0.0f};
}

void GraphedTrainStep::body() {
  Tensor loss = cross_entropy(model_(images_), labels_, options_.label_smoothing);
  optimizer_.zero_grad();
  loss.backward(ones_);
  result_.zero_();
  std::vector<FiniteSlot> slots;
  for (const Tensor& p : params_)
    if (p.grad().defined()) {
      DPT_CHECK(p.grad().is_contiguous())
          << "cuda_graphs: a gradient " << shape_str(p.shape()) << " is not contiguous";
      slots.push_back({p.grad().data<float>(), p.grad().numel()});
    }
  if (options_.check_loss) slots.push_back({loss.data<float>(), 1});
  float* out = result_.data<float>();
  kernels_for(device_).flag_nonfinite(slots, device_.index, out + 1);
  copy_bytes(out, result_.device(), loss.raw_data(), loss.device(),
             sizeof(float));  // on the device: captured
  optimizer_.step_apply();
  if (ema_) ema_->update_apply(net_);
}

}  // namespace dpt::optim
