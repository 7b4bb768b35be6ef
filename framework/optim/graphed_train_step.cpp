#include "optim/graphed_train_step.h"

#include "autograd/node.h"
#include "core/error.h"
#include "core/storage.h"
#include "ops/loss.h"

#ifdef DPT_WITH_CUDA
#include "backend/cuda/elementwise.h"
#include "backend/cuda/graph.h"
#include "backend/cuda/loss.h"
#include "backend/cuda/optim.h"
#include "backend/cuda/upload.h"
#endif

namespace dpt::cuda {

#ifdef DPT_WITH_CUDA
void GraphedStepDelete::operator()(GraphedStep* step) const { delete step; }
#else
void GraphedStepDelete::operator()(GraphedStep*) const {}
#endif

}  // namespace dpt::cuda

namespace dpt::optim {

#ifndef DPT_WITH_CUDA

GraphedTrainStep::GraphedTrainStep(nn::Module& model, const nn::Module& net, Optimizer& optimizer, Ema* ema,
                                   Shape, GraphedTrainOptions options)
    : model_(model), net_(net), optimizer_(optimizer), ema_(ema), options_(options) {
  DPT_FAIL() << "cuda_graphs: this build of dpt has no CUDA backend";
}
GraphedTrainStep::~GraphedTrainStep() = default;
GraphedStepResult GraphedTrainStep::run(const Tensor&, const Tensor&, float) { return {}; }
bool GraphedTrainStep::graphed() const { return false; }
size_t GraphedTrainStep::graph_nodes() const { return 0; }
void GraphedTrainStep::body() {}

#else

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
    DPT_CHECK(p.device().is_cuda() && p.device() == device)
        << "cuda_graphs: needs the model on one CUDA device, a parameter " << shape_str(p.shape())
        << " is on " << p.device().str();
  DPT_CHECK(images_shape.size() >= 1 && images_shape[0] > 0)
      << "cuda_graphs: images shape " << shape_str(images_shape) << " has no batch dimension";
  DPT_CHECK(options.classes > 0) << "cuda_graphs: the number of classes must be given";
  device_ = device.index;
  images_ = Tensor::zeros(images_shape, DType::f32, device);
  labels_ = Tensor::zeros({images_shape[0]}, DType::i64, device);
  ones_ = Tensor::full({}, 1.0f).to(device);
  result_ = Tensor::zeros({2}, DType::f32, device);
  images_upload_.reset(new cuda::Upload(images_.numel() * sizeof(float), device_));
  labels_upload_.reset(new cuda::Upload(labels_.numel() * sizeof(int64_t), device_));
  step_.reset(new cuda::GraphedStep(device_, options.warmup, [this] { body(); }));
}

GraphedTrainStep::~GraphedTrainStep() = default;

bool GraphedTrainStep::graphed() const { return step_->graphed(); }
size_t GraphedTrainStep::graph_nodes() const { return step_->graph().node_count(); }

GraphedStepResult GraphedTrainStep::run(const Tensor& images, const Tensor& labels, float lr) {
  DPT_CHECK(images.shape() == images_.shape() && images.dtype() == DType::f32)
      << "cuda_graphs: a batch of f32 images " << shape_str(images.shape()) << ", the captured step takes "
      << shape_str(images_.shape())
      << " (a graph replays one shape; the training loader drops the last partial "
      << "batch)";
  DPT_CHECK(labels.dtype() == DType::i64 && labels.shape() == labels_.shape())
      << "cuda_graphs: expected i64 labels " << shape_str(labels_.shape()) << ", got "
      << dtype_name(labels.dtype()) << " " << shape_str(labels.shape());
  // The label check the loss does eagerly, here before the replay: inside the graph it
  // cannot read back (ops/loss.cpp skips it there).
  if (labels.device().is_cuda()) {
    // A batch already on the device (the Trainer's BatchSource): checked there, with the eager
    // loss's small read-back, and copied into the static buffers on the device, queued.
    int64_t label = 0;
    const int64_t row = cuda::first_bad_label(cuda::contiguous(labels), options_.classes, &label);
    DPT_CHECK(row < 0) << "cross_entropy: label " << label << " at row " << row << " is outside [0, "
                       << options_.classes << ")";
    labels_.copy_from(labels);
  } else {
    Tensor host_labels = labels.contiguous();
    const int64_t* l = host_labels.data<int64_t>();
    for (int64_t i = 0; i < host_labels.numel(); ++i)
      DPT_CHECK(l[i] >= 0 && l[i] < options_.classes) << "cross_entropy: label " << l[i] << " at row " << i
                                                      << " is outside [0, " << options_.classes << ")";
    labels_upload_->copy(labels_.raw_data(), l, host_labels.numel() * sizeof(int64_t));
  }
  if (images.device().is_cuda()) {
    images_.copy_from(images);  // on the device: queued, no wait
  } else {
    Tensor src = images.contiguous();
    images_upload_->copy(images_.raw_data(), src.raw_data(), src.numel() * sizeof(float));
  }
  optimizer_.step_prepare(lr);
  if (ema_) ema_->update_prepare();
  step_->run();
  // A replay updates the parameters without the host code that marks them written (that ran
  // once, at the capture): mark them here, so that copies made from them for eager use
  // (nn/compute.h's bf16 / channels-last weight cache, in evaluation) are remade.
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
  std::vector<cuda::FiniteSlot> slots;
  for (const Tensor& p : params_)
    if (p.grad().defined()) {
      DPT_CHECK(p.grad().is_contiguous())
          << "cuda_graphs: a gradient " << shape_str(p.shape()) << " is not contiguous";
      slots.push_back({p.grad().data<float>(), p.grad().numel()});
    }
  if (options_.check_loss) slots.push_back({loss.data<float>(), 1});
  float* out = result_.data<float>();
  cuda::flag_nonfinite(slots, device_, out + 1);
  copy_bytes(out, result_.device(), loss.raw_data(), loss.device(),
             sizeof(float));  // on the device: captured
  optimizer_.step_apply();
  if (ema_) ema_->update_apply(net_);
}

#endif

}  // namespace dpt::optim
