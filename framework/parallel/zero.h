// ZeRO-1 (Rajbhandari et al. 2020, stage 1): the optimizer state sharded over DDP's group.
// DDP reduce-scatters each gradient bucket (DdpOptions::shard_gradients); a rank keeps the
// state of its chunk only, updates it, and the parameters (one flat buffer per bucket) are
// all-gathered, optionally while the next forward runs (gather_during_forward: each layer
// waits for its own buckets in nn::Module::before_forward). The update is the wrapped
// rule's, element for element; the state per rank is 1/N of it.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "parallel/ddp.h"
#include "optim/optimizer.h"

namespace dpt::dist {

// Makes the update rule (optim::Sgd, optim::AdamW, ...) over the groups it is given.
using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;

class ZeroOptimizer final : public optim::Optimizer {
 public:
  // `groups` hold parameters of ddp.module(), each at most once; `make` builds the rule over
  // this rank's shard of them. Requires DDP made with shard_gradients (Error otherwise).
  // Moves every parameter into its bucket's flat buffer, values and identity kept (as
  // Module::to): move the model to its device before. Collective; `ddp` must outlive it.
  ZeroOptimizer(DistributedDataParallel& ddp, std::vector<optim::ParamGroup> groups,
                const MakeOptimizer& make);
  ~ZeroOptimizer() override;

  // From now on step() returns with the all-gathers in flight (in forward order) and each
  // layer waits for its own buckets before its forward; other readers of the parameters
  // call parameters_ready() first. Returns false, and leaves step() waiting, when a module
  // with parameters does not run the hook (nn::Module::calls_before_forward).
  bool gather_during_forward();
  void parameters_ready() override;
  // Buckets whose all-gather step() started and nothing has waited for yet.
  int gathers_pending() const;

  // Updates this rank's shard, then all-gathers the parameters. Collective.
  void step(float lr) override;
  // CUDA graphs are not supported (Error): a captured step would need its collectives in the graph.
  void step_prepare(float lr) override;
  void step_apply() override { step_prepare(0.0f); }

  // this rank's shard
  std::vector<StateTensor> state_tensors() const override { return rule_->state_tensors(); }
  std::vector<std::string> state_kinds() const override { return rule_->state_kinds(); }
  int64_t step_count() const override { return rule_->step_count(); }
  void set_step_count(int64_t steps) override { rule_->set_step_count(steps); }
  std::vector<StateTensor> state_for_save() override;  // collective: whole on the group's rank 0
  std::vector<StateTensor> state_for_load() override;
  void state_loaded() override;
  std::vector<Tensor> step_gradients() const override;  // this rank's chunk of each bucket
  bool all_ranks(bool ok) const override;               // collective

 private:
  // Elements [begin, begin + length) of parameter `param`, at chunk_offset in this rank's
  // chunk of bucket `bucket`.
  struct Segment {
    size_t bucket, param;
    int64_t begin, length, chunk_offset;
  };
  struct FlatBucket {
    Tensor params;  // the bucket's parameters, back to back, in the Reducer's bucket order
    Chunk mine;     // this rank's elements of it
  };

  // The rule's state tensors, checked: segment s's kind k at s * state_kinds().size() + k.
  std::vector<StateTensor> segment_state() const;
  // Waits for bucket b's all-gather if one is pending.
  void gather_wait(size_t b);

  GroupPtr group_;
  nn::Module& module_;  // DDP's
  const Reducer& reducer_;
  nn::NamedTensors params_;                        // the module's, in the Reducer's order
  std::vector<std::vector<size_t>> group_params_;  // each group's parameters, as indices into params_
  std::vector<FlatBucket> buckets_;
  std::vector<WorkPtr> gathers_;  // per bucket: the all-gather step() started, until waited for
  bool gather_during_forward_ = false;
  std::vector<Segment> segments_;  // in the rule's parameter order
  std::unique_ptr<optim::Optimizer> rule_;
  std::vector<std::vector<Tensor>> loading_;  // state_for_load's tensors, [param][kind]
};

}  // namespace dpt::dist
