// DistributedDataParallel: one model replica per rank, kept identical. Construction
// checks that every rank built the same parameters and broadcasts rank 0's values; each
// backward averages the gradients in buckets that overlap it (reducer.h).
#pragma once

#include <memory>

#include "parallel/ddp_options.h"
#include "parallel/reducer.h"
#include "nn/module.h"

namespace dpt::dist {

class BufferBroadcast;  // ddp.cpp

class DistributedDataParallel : public nn::Module {
 public:
  // Collective over `group` (the world when null). Throws Error on every rank when the
  // ranks' parameters differ in count, names or shapes, naming the first difference.
  DistributedDataParallel(nn::ModulePtr module, GroupPtr group = nullptr, DdpOptions options = {});
  ~DistributedDataParallel() override;
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "DistributedDataParallel(" + module_->describe() + ")"; }
  nn::Module& module() { return *module_; }
  const Reducer& reducer() const { return *reducer_; }
  // How each gradient bucket is averaged from the next backward on (reducer.h's CommHook;
  // PyTorch's register_comm_hook). Every rank must register the same hook.
  void register_comm_hook(CommHook hook) { reducer_->set_comm_hook(std::move(hook)); }
  const GroupPtr& group() const { return group_; }
  const DdpOptions& options() const { return options_; }

  // While alive, backward passes accumulate gradients locally; the next synchronised
  // backward all-reduces the sum.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp) { ddp_.sync_ = false; }
    ~NoSync() { ddp_.sync_ = true; }

   private:
    DistributedDataParallel& ddp_;
  };
  NoSync no_sync() { return NoSync(*this); }
  // Makes the next backward synchronised whatever no_sync said at its forward (a pipeline's
  // last backward, whose forward was not the last). Call right before that backward.
  void sync_next_backward() { reducer_->prepare_for_backward(true); }

 private:
  nn::ModulePtr module_;
  GroupPtr group_;
  DdpOptions options_;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<BufferBroadcast> buffers_;  // null without broadcast_buffers (or with sync_bn)
  bool sync_ = true;
};

}  // namespace dpt::dist
