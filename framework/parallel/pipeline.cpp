#include "parallel/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "ops/elementwise.h"

namespace dpt::dist {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// An activation's header: dtype, number of dimensions, then the sizes.
constexpr int64_t kMaxDims = 6;
constexpr int64_t kHeaderSize = 2 + kMaxDims;

// Rows [m * N / M, (m + 1) * N / M) of a contiguous [N, ...] tensor, as a view.
Tensor micro_rows(const Tensor& t, int m, int micro_batches) {
  Shape shape = t.shape();
  const int64_t rows = shape[0] / micro_batches, per_row = t.numel() / std::max<int64_t>(shape[0], 1);
  shape[0] = rows;
  return t.as_strided(shape, shape_contiguous_strides(shape), t.offset() + m * rows * per_row);
}

}  // namespace

struct Pipeline::MicroBatch {
  Tensor input;   // the batch's rows on the first stage, else a received leaf
  Tensor output;  // all but the last stage
  Tensor loss;    // the last stage's, scaled by 1 / M
  double loss_value = 0;
};

Pipeline::Pipeline(nn::ModulePtr stage, GroupPtr group, LossFn loss, PipelineOptions options)
    : module_(std::move(stage)), group_(std::move(group)), loss_(std::move(loss)), options_(options) {
  DPT_CHECK(module_ && group_ && loss_) << "Pipeline: needs a stage, a group and a loss";
  ddp_ = dynamic_cast<DistributedDataParallel*>(module_.get());
  stage_ = dynamic_cast<nn::PipelineStage*>(ddp_ ? &ddp_->module() : module_.get());
  DPT_CHECK(stage_) << "Pipeline: the stage must be an nn::PipelineStage (nn::split_stage) or a "
                       "DistributedDataParallel over one, got "
                    << module_->describe();
  DPT_CHECK(stage_->count() == group_->size() && stage_->index() == group_->rank())
      << "Pipeline on " << group_->name() << ": group rank " << group_->rank() << " of " << group_->size()
      << " holds stage " << stage_->index() << " of " << stage_->count()
      << " (each rank of the pipeline group runs the stage of its rank)";
  DPT_CHECK(options_.micro_batches >= 1)
      << "Pipeline: micro_batches must be >= 1, got " << options_.micro_batches;
}

PipelineStepStats Pipeline::train_step(const Tensor& input, const Tensor& target) {
  const Clock::time_point start = Clock::now();
  const int M = options_.micro_batches, S = stage_->count(), s = stage_->index();
  DPT_CHECK(input.defined() && target.defined() && input.dim() >= 1 && target.dim() >= 1)
      << "Pipeline::train_step on stage " << s << ": every stage passes the batch's input and target";
  const int64_t n = input.size(0);
  DPT_CHECK(target.size(0) == n) << "Pipeline::train_step on stage " << s << ": the input has " << n
                                 << " rows but the target " << target.size(0);
  DPT_CHECK(n % M == 0 && n > 0) << "Pipeline on " << group_->name() << ", stage " << s << ": " << M
                                 << " micro-batches do not divide the batch of " << n
                                 << " samples (the batch must be a multiple of the micro-batch count)";
  const Tensor inputs = input.contiguous(), targets = target.contiguous();

  compute_ms_ = 0;
  std::optional<DistributedDataParallel::NoSync> no_sync;
  if (ddp_) no_sync.emplace(*ddp_);  // the step's last backward is synchronised by hand
  std::vector<MicroBatch> micro(M);
  int held = 0, most = 0;
  for (const PipelineAction& a : pipeline_actions(options_.schedule, S, s, M)) {
    MicroBatch& mb = micro[a.micro_batch];
    if (a.forward) {
      run_forward(mb, micro_rows(inputs, a.micro_batch, M), micro_rows(targets, a.micro_batch, M));
      most = std::max(most, ++held);
    } else {
      if (ddp_ && a.micro_batch == M - 1) ddp_->sync_next_backward();
      run_backward(mb);
      --held;
      mb.input = mb.output = mb.loss = Tensor();  // frees this micro-batch's activations
    }
    // Sends complete in order; let go of what the completed ones read.
    while (!sends_.empty() && sends_.front().first->is_completed()) sends_.pop_front();
  }
  exchange({});
  for (auto& [work, tensor] : sends_) work->wait();
  sends_.clear();

  // The mean loss, from the last stage to all (as the bits of a double in an i64).
  double loss = 0;
  for (const MicroBatch& mb : micro) loss += mb.loss_value;
  loss /= M;
  int64_t bits = 0;
  std::memcpy(&bits, &loss, sizeof bits);
  Tensor shared = Tensor::from_vector(std::vector<int64_t>{bits}, {1});
  group_->broadcast(shared, S - 1)->wait();
  bits = shared.data<int64_t>()[0];
  std::memcpy(&loss, &bits, sizeof loss);

  const double step_ms = ms_since(start);
  return {.loss = loss,
          .step_ms = step_ms,
          .compute_ms = compute_ms_,
          .idle_ms = step_ms - compute_ms_,
          .max_in_flight = most};
}

void Pipeline::run_forward(MicroBatch& mb, const Tensor& input, const Tensor& target) {
  if (stage_->is_first()) {
    exchange({});
    mb.input = input;
  } else {
    mb.input = receive_activation();
    mb.input.set_requires_grad(true);  // its .grad is what the previous stage's backward needs
  }
  const Clock::time_point start = Clock::now();
  Tensor out = module_->forward(mb.input);
  if (stage_->is_last()) {
    Tensor loss = loss_(out, target);
    mb.loss_value = loss.item();
    mb.loss = mul(loss, 1.0f / static_cast<float>(options_.micro_batches));
  } else {
    mb.output = out;
  }
  compute_ms_ += ms_since(start);
  if (!stage_->is_last()) send_activation(out);
}

void Pipeline::run_backward(MicroBatch& mb) {
  Tensor grad;
  if (stage_->is_last()) {
    exchange({});
  } else {
    grad = Tensor::empty(mb.output.shape(), mb.output.dtype(), mb.output.device());
    exchange({{false, grad, group_->rank() + 1}}).front()->wait();
  }
  const Clock::time_point start = Clock::now();
  (stage_->is_last() ? mb.loss : mb.output).backward(grad);  // the last stage's grad: undefined, so 1
  compute_ms_ += ms_since(start);
  if (stage_->is_first()) return;
  Tensor input_grad = mb.input.grad();
  if (!input_grad.defined())
    input_grad = Tensor::zeros(mb.input.shape(), mb.input.dtype(), mb.input.device());
  input_grad = input_grad.contiguous();
  outgoing_.push_back({true, input_grad, group_->rank() - 1});
}

std::vector<WorkPtr> Pipeline::exchange(const std::vector<P2POp>& receives) {
  std::vector<P2POp> ops = std::move(outgoing_);
  outgoing_.clear();
  const size_t sends = ops.size();
  ops.insert(ops.end(), receives.begin(), receives.end());
  if (ops.empty()) return {};
  std::vector<WorkPtr> works = group_->batch_send_recv(ops);
  for (size_t i = 0; i < sends; ++i) sends_.emplace_back(works[i], ops[i].tensor);
  return {works.begin() + static_cast<std::ptrdiff_t>(sends), works.end()};
}

Tensor Pipeline::receive_activation() {
  const int from = group_->rank() - 1;
  Tensor header = Tensor::empty({kHeaderSize}, DType::i64);
  exchange({{false, header, from}}).front()->wait();
  const int64_t* h = header.data<int64_t>();
  DPT_CHECK(h[1] >= 1 && h[1] <= kMaxDims)
      << "Pipeline on " << group_->name() << ": a malformed header from rank " << from;
  Shape shape(h + 2, h + 2 + h[1]);
  // On the stage's device (its first parameter's).
  Tensor x = Tensor::empty(shape, static_cast<DType>(h[0]), stage_->parameters().front().device());
  exchange({{false, x, from}}).front()->wait();
  return x;
}

void Pipeline::send_activation(const Tensor& t) {
  DPT_CHECK(t.dim() >= 1 && t.dim() <= kMaxDims)
      << "Pipeline on " << group_->name() << ": stage " << stage_->index() << " outputs a " << t.dim()
      << "-d tensor; activations between stages have 1 to " << kMaxDims << " dimensions";
  std::vector<int64_t> h(kHeaderSize, 0);
  h[0] = static_cast<int64_t>(t.dtype());
  h[1] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) h[2 + d] = t.size(d);
  Tensor header = Tensor::from_vector(h, {kHeaderSize});
  Tensor data = t.contiguous();
  const int to = group_->rank() + 1;
  outgoing_.push_back({true, header, to});
  outgoing_.push_back({true, data, to});
}

}  // namespace dpt::dist
