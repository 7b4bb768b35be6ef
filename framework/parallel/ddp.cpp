#include "parallel/ddp.h"

#include <algorithm>
#include <sstream>

#include "autograd/node.h"
#include "comm/dist.h"
#include "comm/hierarchical.h"
#include "nn/layers.h"

namespace dpt::dist {
namespace {

// Throws Error on every rank of `group` unless all ranks hold parameters with the same
// names and shapes, in the same order.
void check_same_parameters(const nn::NamedTensors& params, ProcessGroup& group) {
  // Every rank's parameter lines ("'name' [shape]").
  std::string text;
  for (const auto& [name, t] : params) text += "'" + name + "' " + shape_str(t.shape()) + "\n";
  const std::vector<std::string> texts = gather_text(text, group);
  std::vector<std::vector<std::string>> lines(group.size());
  for (int r = 0; r < group.size(); ++r) {
    std::istringstream in(texts[r]);
    for (std::string line; std::getline(in, line);) lines[r].push_back(line);
  }
  for (int r = 1; r < group.size(); ++r) {
    const auto &a = lines[0], &b = lines[r];
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      if (i < a.size() && i < b.size() && a[i] == b[i]) continue;
      std::ostringstream msg;
      msg << "DDP on " << group.name() << ": ranks 0 and " << r << " (world ranks " << group.world_ranks()[0]
          << " and " << group.world_ranks()[r] << ") hold different parameters: parameter " << i << " is "
          << (i < a.size() ? a[i] : "missing (" + std::to_string(a.size()) + " parameters)") << " on rank 0 and "
          << (i < b.size() ? b[i] : "missing (" + std::to_string(b.size()) + " parameters)") << " on rank " << r;
      throw Error(msg.str());
    }
  }
}

}  // namespace

// DDP's buffers (batch-norm running statistics) kept equal on every rank off the critical
// path: after each training forward, start() packs them into one flat buffer per dtype and
// broadcasts rank 0's while backward runs; finish(), at its end (or before the next
// forward), waits, rethrowing a failed broadcast's error, and copies rank 0's values in.
// Collective over the group; every rank's buffers in the same order, shapes and dtypes.
class BufferBroadcast {
 public:
  BufferBroadcast(const nn::NamedTensors& buffers, GroupPtr group);
  void start();
  void finish();

 private:
  struct Flat {
    Tensor flat;
    std::vector<Tensor> buffers, views;  // each buffer and its place in `flat`
  };
  GroupPtr group_;
  std::vector<Flat> flats_;
  std::vector<WorkPtr> pending_;
};

BufferBroadcast::BufferBroadcast(const nn::NamedTensors& buffers, GroupPtr group) : group_(std::move(group)) {
  // One flat buffer per dtype, in the order the dtypes first appear.
  std::vector<DType> dtypes;
  for (const auto& [name, t] : buffers)
    if (std::find(dtypes.begin(), dtypes.end(), t.dtype()) == dtypes.end()) dtypes.push_back(t.dtype());
  for (DType dtype : dtypes) {
    Flat f;
    int64_t numel = 0;
    for (const auto& [name, t] : buffers)
      if (t.dtype() == dtype) numel += t.numel();
    if (numel == 0) continue;
    const Device device = buffers.front().second.device();
    f.flat = group_->collective_buffer(numel, dtype, device);
    int64_t offset = 0;
    for (const auto& [name, t] : buffers) {
      if (t.dtype() != dtype || t.numel() == 0) continue;
      DPT_CHECK(t.device() == device) << "DDP: buffer '" << name << "' is on " << t.device().str()
                                      << ", the model's first buffer on " << device.str();
      f.buffers.push_back(t);
      f.views.push_back(f.flat.as_strided(t.shape(), shape_contiguous_strides(t.shape()), offset));
      offset += t.numel();
    }
    flats_.push_back(std::move(f));
  }
}

void BufferBroadcast::start() {
  finish();
  const bool root = group_->rank() == 0;  // the others' flat buffers only receive
  for (Flat& f : flats_) {
    if (root)
      for (size_t i = 0; i < f.buffers.size(); ++i) f.views[i].copy_from(f.buffers[i]);
    pending_.push_back(group_->broadcast(f.flat, 0));
  }
}

void BufferBroadcast::finish() {
  if (pending_.empty()) return;
  std::vector<WorkPtr> works = std::move(pending_);
  pending_.clear();
  for (WorkPtr& w : works) w->wait();
  if (group_->rank() == 0) return;  // its buffers are the values broadcast
  for (Flat& f : flats_)
    for (size_t i = 0; i < f.buffers.size(); ++i) f.buffers[i].copy_from(f.views[i]);
}

DistributedDataParallel::DistributedDataParallel(nn::ModulePtr module, GroupPtr group, DdpOptions options)
    : module_(std::move(module)), group_(group ? std::move(group) : world()), options_(options) {
  register_module("module", module_);
  nn::NamedTensors params = module_->named_parameters();
  check_same_parameters(params, *group_);
  {
    autograd::NoGrad no_grad;
    std::vector<WorkPtr> works;
    nn::NamedTensors state = module_->state_dict();
    for (auto& [name, t] : state) works.push_back(group_->broadcast(t, 0));
    for (auto& w : works) w->wait();
    for (auto& [name, t] : state) t.storage()->bump_version();  // rank 0's values: cached casts are stale
  }
  if (options_.sync_bn) {
    GroupPtr g = group_;
    for (nn::Module* m : module_->modules())
      if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m))
        bn->set_sum_across_ranks([g](const Tensor& t) { g->all_reduce(t, ReduceOp::sum)->wait(); });
  }
  DPT_CHECK(options_.compress == Compression::none || params.empty() || params.front().second.device().is_cpu())
      << "DDP on " << group_->name() << ": distributed.compress: bf16 acts on the MPI all-reduce between hosts, "
      << "for CPU tensors, but the model is on " << params.front().second.device().str()
      << " (NCCL all-reduces CUDA tensors): set distributed.compress: none";
  reducer_ = std::make_unique<Reducer>(params, group_, options_);
  if (options_.compress == Compression::bf16)
    reducer_->set_comm_hook([](ProcessGroup& g, const Tensor& bucket) {
      return all_reduce_bf16_across_hosts(g, bucket);
    });

  if (options_.broadcast_buffers && !options_.sync_bn && !module_->named_buffers().empty()) {
    buffers_ = std::make_unique<BufferBroadcast>(module_->named_buffers(), group_);
    reducer_->set_backward_done([b = buffers_.get()] { b->finish(); });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (buffers_) buffers_->finish();  // the last training forward's, if its backward did not
  if (is_training() && autograd::grad_enabled()) reducer_->prepare_for_backward(sync_);
  Tensor y = module_->forward(x);
  // Started after the forward that moved the statistics, on every rank before any bucket
  // of its backward, so the group's collectives line up.
  if (buffers_ && is_training()) buffers_->start();
  return y;
}

}  // namespace dpt::dist
