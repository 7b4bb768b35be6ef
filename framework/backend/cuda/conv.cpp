// cuDNN convolution (see kernel_list.h). A Plan per (device, shapes, parameters, dtype,
// layout, math settings) holds the descriptors and the three algorithms cuDNN's heuristics
// rank first among those whose workspace fits kWorkspaceLimit; it is made on the shape's
// first use and kept, so the steady state only queues cuDNN calls. Workspaces come from the
// caching allocator.
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cudnn_desc.h"
#include "backend/cuda/device.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/math_settings.h"

namespace dpt::cuda {
namespace {

constexpr size_t kWorkspaceLimit = size_t{1} << 30;

struct Plan {
  Plan(const Shape& xs, const Shape& ws, const Shape& ys, const ConvParams& p, DType dtype, bool tf32)
      : x(xs, "conv2d", dtype, p.nhwc),
        y(ys, "conv2d", dtype, p.nhwc),
        bias({1, ys[1], 1, 1}, "conv2d"),
        w(ws, "conv2d", dtype, p.nhwc),
        conv(p.padding, p.stride, p.dilation, p.groups, tf32, dtype == DType::bf16),
        bf16(dtype == DType::bf16) {}

  // bf16: cuDNN pairs each algorithm with the math type its heuristics reported, which is
  // set on the shared descriptor before that direction's calls (as PyTorch does). f32
  // keeps the descriptor's own (FMA, or TF32 when enabled).
  void use_math(cudnnMathType_t math) const {
    if (bf16) CUDNN_CHECK(cudnnSetConvolutionMathType(conv.get(), math));
  }

  TensorDescriptor x, y, bias;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  bool bf16;
  cudnnConvolutionFwdAlgo_t forward{};
  cudnnConvolutionBwdDataAlgo_t backward_data{};
  cudnnConvolutionBwdFilterAlgo_t backward_filter{};
  cudnnMathType_t forward_math{}, backward_data_math{}, backward_filter_math{};
  size_t forward_bytes = 0, backward_data_bytes = 0, backward_filter_bytes = 0;
};

// cuDNN's heuristics list algorithms fastest first; the first that runs here (status
// success) within the workspace limit, and is deterministic where that is asked for
// (math_settings.h), is taken.
template <class Perf>
const Perf& first_fitting(const std::vector<Perf>& perf, int count, bool deterministic, const char* direction,
                          const Shape& xs, const Shape& ws) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kWorkspaceLimit &&
        (!deterministic || perf[i].determinism == CUDNN_DETERMINISTIC))
      return perf[i];
  DPT_FAIL() << "conv2d on cuda: cuDNN offers no " << (deterministic ? "deterministic " : "") << direction
             << " algorithm for input " << shape_str(xs) << " and weight " << shape_str(ws) << " within "
             << (kWorkspaceLimit >> 20) << " MiB of workspace";
}

std::unique_ptr<Plan> plan_make(cudnnHandle_t handle, const Shape& xs, const Shape& ws, const Shape& ys,
                                const ConvParams& p, DType dtype, bool tf32, bool deterministic) {
  auto plan = std::make_unique<Plan>(xs, ws, ys, p, dtype, tf32);
  int max = 0, count = 0;
  // bf16: each direction's heuristics query starts from the descriptor's own math type
  // (tensor cores allowed), not from the one the previous direction's choice left on it:
  // an FMA-only forward algorithm (a 3-channel stem) would otherwise limit the backward
  // queries to FMA kernels.
  const cudnnMathType_t search_math = CUDNN_TENSOR_OP_MATH;

  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> forward(max);
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, plan->x.get(), plan->w.get(), plan->conv.get(),
                                                     plan->y.get(), max, &count, forward.data()));
  const auto& forward_perf = first_fitting(forward, count, deterministic, "forward", xs, ws);
  plan->forward = forward_perf.algo;
  plan->forward_math = forward_perf.mathType;
  plan->use_math(plan->forward_math);
  CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle, plan->x.get(), plan->w.get(), plan->conv.get(),
                                                      plan->y.get(), plan->forward, &plan->forward_bytes));

  plan->use_math(search_math);
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> data(max);
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      handle, plan->w.get(), plan->y.get(), plan->conv.get(), plan->x.get(), max, &count, data.data()));
  const auto& data_perf = first_fitting(data, count, deterministic, "backward-data", xs, ws);
  plan->backward_data = data_perf.algo;
  plan->backward_data_math = data_perf.mathType;
  plan->use_math(plan->backward_data_math);
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle, plan->w.get(), plan->y.get(),
                                                           plan->conv.get(), plan->x.get(),
                                                           plan->backward_data, &plan->backward_data_bytes));

  plan->use_math(search_math);
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &max));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> filter(max);
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      handle, plan->x.get(), plan->y.get(), plan->conv.get(), plan->w.get(), max, &count, filter.data()));
  const auto& filter_perf = first_fitting(filter, count, deterministic, "backward-filter", xs, ws);
  plan->backward_filter = filter_perf.algo;
  plan->backward_filter_math = filter_perf.mathType;
  plan->use_math(plan->backward_filter_math);
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
      handle, plan->x.get(), plan->y.get(), plan->conv.get(), plan->w.get(), plan->backward_filter,
      &plan->backward_filter_bytes));
  return plan;
}

using PlanKey = std::array<int64_t, 17>;

// Requires: `device` current. Plans are never destroyed (as device contexts are not).
Plan& plan_for(int device, const Shape& xs, const Shape& ws, const ConvParams& p, DType dtype) {
  Shape ys = {xs[0], ws[0], (xs[2] + 2 * p.padding - p.dilation * (ws[2] - 1) - 1) / p.stride + 1,
              (xs[3] + 2 * p.padding - p.dilation * (ws[3] - 1) - 1) / p.stride + 1};
  bool tf32 = tf32_enabled(), deterministic = cudnn_deterministic();
  PlanKey key{device,     xs[0],        xs[1], xs[2],    xs[3],
              ws[0],      ws[2],        ws[3], p.stride, p.padding,
              p.dilation, p.groups,     tf32,  ws[1],    static_cast<int64_t>(dtype),
              p.nhwc,     deterministic};
  static std::mutex mutex;
  static auto* plans = new std::map<PlanKey, std::unique_ptr<Plan>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans->find(key);
  if (it == plans->end())
    it = plans
             ->emplace(key,
                       plan_make(device_context(device).cudnn(), xs, ws, ys, p, dtype, tf32, deterministic))
             .first;
  return *it->second;
}

// t in the plan's layout and dtype.
void check_layout(const char* what, const Tensor& t, const ConvParams& p, DType dtype) {
  DPT_CHECK(p.nhwc ? t.is_channels_last() : t.is_contiguous())
      << "conv2d on cuda: " << what << " must be " << (p.nhwc ? "channels-last NHWC" : "contiguous NCHW");
  DPT_CHECK(t.dtype() == dtype) << "conv2d on cuda: " << what << " is " << dtype_name(t.dtype())
                                << ", expected " << dtype_name(dtype);
}

// cuDNN's bias calls take the f32 NCHW case; channel.cu the others.
bool cudnn_bias(const ConvParams& p, DType dtype) { return !p.nhwc && dtype == DType::f32; }

// Requires: x, w and out of one dtype in p.nhwc's layout; bias f32 [OC] or undefined.
// Ensures: out = conv(x, w) + bias, then max(0, .) when relu; every element written.
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p, bool relu,
                    const Tensor& out) {
  DType dtype = x.dtype();
  check_layout("input", x, p, dtype);
  check_layout("weight", w, p, dtype);
  check_layout("output", out, p, dtype);
  int device = out.device().index;
  DeviceGuard guard(device);
  Plan& plan = plan_for(device, x.shape(), w.shape(), p, dtype);
  cudnnHandle_t handle = device_context(device).cudnn();
  DeviceBuffer workspace(plan.forward_bytes, device);
  // alpha and beta are f32 for f32 and bf16 data alike.
  const float one = 1.0f, zero = 0.0f;
  plan.use_math(plan.forward_math);
  CUDNN_CHECK(cudnnConvolutionForward(handle, &one, plan.x.get(), x.raw_data(), plan.w.get(), w.raw_data(),
                                      plan.conv.get(), plan.forward, workspace.as<void>(), plan.forward_bytes,
                                      &zero, plan.y.get(), out.raw_data()));
  if (bias.defined() && !cudnn_bias(p, dtype)) return channel_bias_add(out, bias, relu);
  if (bias.defined())
    CUDNN_CHECK(cudnnAddTensor(handle, &one, plan.bias.get(), bias.data<float>(), &one, plan.y.get(),
                               out.data<float>()));
  if (relu) relu_forward(out, out);
}

}  // namespace

void conv2d_backward(const Shape& x_shape, const Shape& w_shape, const Tensor& x, const Tensor& w,
                     const Tensor& grad_out, const ConvParams& p, const Tensor& grad_x, const Tensor& grad_w,
                     const Tensor& grad_bias) {
  DType dtype = grad_out.dtype();
  check_layout("output gradient", grad_out, p, dtype);
  int device = grad_out.device().index;
  DeviceGuard guard(device);
  Plan& plan = plan_for(device, x_shape, w_shape, p, dtype);
  cudnnHandle_t handle = device_context(device).cudnn();
  const float one = 1.0f, zero = 0.0f;
  const void* g = grad_out.raw_data();
  if (grad_x.defined()) {
    check_layout("weight", w, p, dtype);
    check_layout("input gradient", grad_x, p, dtype);
    DeviceBuffer workspace(plan.backward_data_bytes, device);
    plan.use_math(plan.backward_data_math);
    CUDNN_CHECK(cudnnConvolutionBackwardData(
        handle, &one, plan.w.get(), w.raw_data(), plan.y.get(), g, plan.conv.get(), plan.backward_data,
        workspace.as<void>(), plan.backward_data_bytes, &zero, plan.x.get(), grad_x.raw_data()));
  }
  if (grad_w.defined()) {
    check_layout("input", x, p, dtype);
    check_layout("weight gradient", grad_w, p, dtype);
    DeviceBuffer workspace(plan.backward_filter_bytes, device);
    plan.use_math(plan.backward_filter_math);
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        handle, &one, plan.x.get(), x.raw_data(), plan.y.get(), g, plan.conv.get(), plan.backward_filter,
        workspace.as<void>(), plan.backward_filter_bytes, &zero, plan.w.get(), grad_w.raw_data()));
  }
  if (grad_bias.defined() && !cudnn_bias(p, dtype)) return channel_sum(grad_out, grad_bias);
  if (grad_bias.defined())
    CUDNN_CHECK(cudnnConvolutionBackwardBias(handle, &one, plan.y.get(), g, &zero, plan.bias.get(),
                                             grad_bias.data<float>()));
}

namespace {

// t in the layout the kernels run in: contiguous NCHW, or channels-last when nhwc.
Tensor in_layout(const Tensor& t, bool nhwc) {
  if (!nhwc) return contiguous(t);
  if (t.is_channels_last()) return t;
  Tensor out = Tensor::empty_channels_last(t.shape(), t.dtype(), t.device());
  cast_copy(t, out);
  return out;
}

}  // namespace

// cuDNN runs NCHW with OIHW weights, or NHWC with OHWI weights: NHWC when asked for or
// when the input already is; f32, or bf16 on tensor cores.
ConvForward conv2d_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const ConvParams& p,
                           bool relu, const Shape& out_shape) {
  ConvForward run;
  run.params = p;
  run.params.nhwc = p.nhwc || (x_in.is_channels_last() && !x_in.is_contiguous());
  run.x = in_layout(x_in, run.params.nhwc);
  run.w = in_layout(w_in, run.params.nhwc);
  run.out = run.params.nhwc ? Tensor::empty_channels_last(out_shape, x_in.dtype(), x_in.device())
                            : Tensor::empty(out_shape, x_in.dtype(), x_in.device());
  conv2d_forward(run.x, run.w, bias.defined() ? contiguous(bias) : Tensor(), run.params, relu, run.out);
  return run;
}

}  // namespace dpt::cuda
