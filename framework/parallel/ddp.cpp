#include "parallel/ddp.h"

#include <algorithm>
#include <sstream>

#include "autograd/node.h"
#include "comm/dist.h"
#include "comm/hierarchical.h"
#include "nn/layers.h"

namespace dpt::dist {
namespace {

// Every rank's parameter lines ("'name' [shape]"), gathered as characters padded to the
// longest text.
std::vector<std::vector<std::string>> gather_signatures(const nn::NamedTensors& params, ProcessGroup& group) {
  std::string text;
  for (const auto& [name, t] : params) text += "'" + name + "' " + shape_str(t.shape()) + "\n";
  Tensor length = Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(text.size())}, {1});
  group.all_reduce(length, ReduceOp::max)->wait();
  int64_t width = length.data<int64_t>()[0];
  std::vector<int64_t> mine(text.begin(), text.end());
  mine.resize(width, 0);
  Tensor all = Tensor::empty({width * group.size()}, DType::i64);
  group.all_gather(all, Tensor::from_vector(mine, {width}))->wait();
  std::vector<std::vector<std::string>> out(group.size());
  const int64_t* p = all.data<int64_t>();
  for (int r = 0; r < group.size(); ++r) {
    std::istringstream in(std::string(p + r * width, std::find(p + r * width, p + (r + 1) * width, 0)));
    for (std::string line; std::getline(in, line);) out[r].push_back(line);
  }
  return out;
}

}  // namespace

void check_same_parameters(const nn::NamedTensors& params, ProcessGroup& group) {
  auto all = gather_signatures(params, group);
  for (int r = 1; r < group.size(); ++r) {
    const auto &a = all[0], &b = all[r];
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
