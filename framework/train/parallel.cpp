#include "train/parallel.h"

#include "comm/dist.h"

namespace dpt::train {

ParallelLayout parallel_layout(const io::Config& config, const std::string& resume) {
  const io::ParallelConfig& p = config.parallel;
  const int world = dist::info().world_size;
  ParallelLayout layout;
  layout.tp = static_cast<int>(p.tp);
  layout.pp = static_cast<int>(p.pp);
  DPT_CHECK(world % (p.tp * p.pp) == 0)
      << "parallel: tp " << p.tp << " x pp " << p.pp << " does not divide the world size " << world;
  layout.dp = p.dp > 0 ? static_cast<int>(p.dp) : world / (layout.tp * layout.pp);
  DPT_CHECK(layout.dp * layout.tp * layout.pp == world)
      << "parallel: dp " << layout.dp << " x tp " << layout.tp << " x pp " << layout.pp << " = "
      << layout.dp * layout.tp * layout.pp << " ranks, but the world size is " << world;
  DPT_CHECK(layout.pp == 1 || layout.tp == 1)
      << "parallel: tp " << layout.tp << " with pp " << layout.pp
      << ": train runs tensor parallelism or pipeline stages, not both";
  if (layout.tp > 1) {
    const YAML::Node split = config.model.node["tensor_parallel"];
    DPT_CHECK(split && split.as<bool>(false))
        << "parallel.tp: " << layout.tp << " needs a model with tensor_parallel: true (model '"
        << config.model.name << "' would be copied on each tp rank, not split)";
    DPT_CHECK(config.checkpoint.every_epochs == 0 && resume.empty())
        << "parallel.tp: " << layout.tp
        << " trains without checkpoints (a checkpoint holds rank 0's model, a tp rank holds a slice): set "
           "checkpoint.every_epochs: 0 and no --resume";
  }
  if (layout.pp > 1) {
    DPT_CHECK(resume.empty()) << "--resume: a run with parallel.pp: " << layout.pp
                              << " starts from scratch (its checkpoints hold one stage's optimizer state)";
    dist::DeviceMesh mesh({layout.pp, layout.dp}, {"pp", "dp"});
    layout.stage = mesh.coordinates()[0];
    layout.data_rank = mesh.coordinates()[1];
    layout.pp_group = mesh.group("pp");
    layout.dp_group = mesh.group("dp");
    return layout;
  }
  if (layout.tp == 1) {  // plain data parallelism: DDP over the world, as without `parallel:`
    layout.dp_group = dist::world();
    layout.data_rank = dist::info().rank;
    return layout;
  }
  dist::DeviceMesh mesh({layout.dp, layout.tp}, {"dp", "tp"});
  layout.dp_group = mesh.group("dp");
  layout.tp_group = mesh.group("tp");
  layout.data_rank = mesh.coordinates()[0];
  return layout;
}

}  // namespace dpt::train
