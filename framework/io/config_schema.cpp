// Every config key, once. To add one: a member in io/config.h, a row here (and a rule
// below if it constrains another key), the code that uses it, then regenerate the docs
// table with `build/config_table docs/configuration.md`.
#include "io/config_schema.h"

namespace dpt::io {
namespace {

// A C++ default as the YAML text of a key's default, for the keys whose defaults live in
// the options struct of the code that uses them (numbers: format_number).
std::string yaml_text(bool value) { return value ? "true" : "false"; }

}  // namespace

std::vector<Key> config_keys(Config& c) {
  // DDP's, the schedule's and the pipeline's keys default to what their code does when given no config.
  const dist::DdpOptions ddp;
  const optim::ScheduleOptions schedule;
  const dist::PipelineOptions pipeline;
  return {
      Key("model.name", &c.model.name, "", "",
          "the model's registry name ([models](#models)); the model reads its other keys beside `name`"),

      Key("dataset.name", choice(&c.dataset.name, "dataset"), "fashion_mnist", "", "the images and labels"),
      Key("dataset.path", &c.dataset.path, "/usr/share/datasets/fashion-mnist", "", "directory of the files")
          .only({"fashion_mnist", "mnist", "cifar10"})
          .default_if("mnist", "data/mnist")
          .default_if("cifar10", "data/cifar10/cifar-10-batches-bin"),
      Key("dataset.shape", &c.dataset.shape, "[1, 28, 28]", ">= 1", "shape of an image")
          .only({"synthetic"})
          .list(3, "3 positive integers [channels, height, width]"),
      Key("dataset.classes", &c.dataset.classes, "10", ">= 2", "number of classes").only({"synthetic"}),
      Key("dataset.size", &c.dataset.size, "60000", ">= 1",
          "training samples; the test set has a sixth as many")
          .only({"synthetic"}),
      Key("dataset.augment", &c.dataset.augment, "false", "",
          "training batches get a random crop (zero padding 4) and a random horizontal flip; evaluation "
          "never"),

      Key("epochs", &c.epochs, "1", ">= 1", "passes over the training set"),
      Key("batch_size", &c.batch_size, "128", ">= 1", "training samples per step and process"),
      Key("eval_batch_size", &c.eval_batch_size, "1000", ">= 1", "evaluation samples per batch and process"),
      Key("max_steps_per_epoch", &c.max_steps_per_epoch, "0", ">= 0", "an epoch ends after this many steps")
          .zero_means("all"),
      Key("log_every", &c.log_every, "50", ">= 1", "steps between progress lines"),
      Key("seed", &c.seed, "0", ">= 0", "seeds initialisation, shuffling, augmentation and synthetic data"),
      Key("threads", &c.threads, "0", "[0, 1024]", "compute threads per process")
          .zero_means("this process's share of the cores"),
      Key("deterministic", &c.deterministic, "false", "",
          "bit-for-bit reproducible CPU runs from the seed, for a given world size and thread count "
          "([checkpoints](checkpoints.md#determinism))"),
      Key("label_smoothing", &c.label_smoothing, "0", "[0, 1)", "label smoothing of the cross-entropy loss"),
      Key("ema_decay", &c.ema_decay, "0", "[0, 1)",
          "decay of an exponential moving average of the weights, which evaluation uses")
          .zero_means("off"),

      Key("optimizer.name", choice(&c.optimizer.name, "optimizer"), "sgd", "", "the optimizer"),
      Key("optimizer.lr", &c.optimizer.lr, "0.1", "> 0", "learning rate (of one process: see lr_scaling)")
          .default_if("adamw", "0.001"),
      Key("optimizer.momentum", &c.optimizer.momentum, "0.9", "[0, 1)", "momentum").only({"sgd"}),
      Key("optimizer.nesterov", &c.optimizer.nesterov, "false", "", "Nesterov momentum (needs momentum > 0)")
          .only({"sgd"}),
      Key("optimizer.betas", &c.optimizer.betas, "[0.9, 0.999]", "[0, 1)",
          "decay rates of the first and second moment estimates")
          .only({"adamw"})
          .list(2, "two numbers in [0, 1), e.g. [0.9, 0.999]"),
      Key("optimizer.eps", &c.optimizer.eps, "1.0e-8", "> 0", "added to the denominator").only({"adamw"}),
      Key("optimizer.weight_decay", &c.optimizer.weight_decay, "0", ">= 0",
          "weight decay (decoupled for adamw)")
          .default_if("adamw", "0.01"),
      Key("optimizer.no_decay_bias_bn", &c.optimizer.no_decay_bias_bn, "true", "",
          "no weight decay on 1-D parameters: biases and batch-norm scales and shifts"),
      Key("optimizer.shard", &c.optimizer.shard, "false", "",
          "ZeRO-1: each rank keeps and updates 1/N of the optimizer state; gradients are "
          "reduce-scattered and the parameters all-gathered ([hybrid](hybrid.md#zero-1))"),
      Key("lr_scaling", choice(&c.lr_scaling, "lr scaling"), "none", "",
          "linear: lr x world size (Goyal et al. 2017; pair it with schedule.warmup_epochs)"),

      Key("schedule.name", choice(&c.schedule.kind, "schedule"), name_of(schedule.kind), "",
          "how the learning rate follows the epochs"),
      Key("schedule.warmup_epochs", &c.schedule.warmup_epochs, std::to_string(schedule.warmup_epochs), ">= 0",
          "epochs of linear warm-up from 0, before the schedule"),
      Key("schedule.milestones", &c.schedule.milestones, "", ">= 1",
          "epochs at which lr is multiplied by gamma")
          .only({"multistep"})
          .list(0, "a list of positive, strictly increasing epochs, e.g. [30, 60]", true),
      Key("schedule.gamma", &c.schedule.gamma, format_number(schedule.gamma), "(0, 1]",
          "factor at each milestone")
          .only({"multistep"}),
      Key("schedule.min_lr", &c.schedule.min_lr, format_number(schedule.min_lr), ">= 0",
          "lr at the end of the last epoch (<= optimizer.lr)")
          .only({"cosine"}),

      Key("device", choice(&c.device, "device"), "auto", "",
          "where each rank trains: cpu; cuda (rank r on cuda:(local rank % devices)); auto: cuda where every "
          "rank can have a GPU of its own and not deterministic, else cpu "
          "([gpu](gpu.md#choosing-the-device))"),
      Key("precision", choice(&c.precision, "precision"), "fp32", "",
          "bf16 (CUDA only): convolutions and matmuls on tensor cores; weights, gradients, batch-norm "
          "statistics and loss stay f32 ([gpu](gpu.md#mixed-precision-and-channels-last))"),
      Key("channels_last", &c.channels_last, "false", "", "NHWC activations (CUDA only)"),
      Key("cuda_graphs", &c.cuda_graphs, "false", "",
          "the training step captured as a CUDA graph after 3 eager steps and replayed; needs a CUDA device "
          "and on_nonfinite: stop ([gpu](gpu.md#cuda-graphs))"),

      Key("distributed.bucket_cap_mb", &c.distributed.ddp.bucket_cap_mb, format_number(ddp.bucket_cap_mb),
          "[0, 1e6]", "DDP's gradient bucket size")
          .unit("MB")
          .zero_means("one bucket per parameter"),
      Key("distributed.sync_bn", &c.distributed.ddp.sync_bn, yaml_text(ddp.sync_bn), "",
          "batch-norm statistics synchronised across ranks"),
      Key("distributed.find_unused_parameters", &c.distributed.ddp.find_unused_parameters,
          yaml_text(ddp.find_unused_parameters), "", "allow parameters that get no gradient in a step"),
      Key("distributed.backend", choice(&c.distributed.backend, "backend"), "auto", "",
          "how gradients travel: auto: NCCL for CUDA tensors, MPI for host tensors; nccl or mpi: the same, "
          "and a run whose device needs the other one stops at start"),
      Key("distributed.timeout_s", &c.distributed.timeout_s, "1800", "[0, 1e9]",
          "a collective not complete after this long ends the run, naming the ranks that did not call it "
          "([faults](faults.md#timeouts))")
          .unit("seconds")
          .zero_means("wait forever"),
      Key("distributed.hierarchical", choice(&c.distributed.hierarchical, "hierarchical mode"), "auto", "",
          "all-reduce across hosts in three steps: within each host, across hosts one share per local rank, "
          "within each host again; auto: when the ranks span more than one host and a host holds more than one "
          "([distributed](distributed.md#hierarchical-all-reduce))"),
      Key("distributed.compress", choice(&c.distributed.ddp.compress, "compression"), name_of(ddp.compress),
          "",
          "bf16: DDP's gradient buckets cross between hosts as bf16 (half the bytes), summed in f32; within a "
          "host nothing changes ([distributed](distributed.md#gradient-compression))"),
      Key("parallel.dp", &c.parallel.dp, "0", ">= 0",
          "data-parallel ranks: DDP over each group of ranks that hold the same slices "
          "([hybrid setups](hybrid.md))")
          .zero_means("the world size / (tp x pp)"),
      Key("parallel.tp", &c.parallel.tp, "1", ">= 1",
          "tensor-parallel ranks: each group splits the layers of a model with `tensor_parallel: true`"),
      Key("parallel.pp", &c.parallel.pp, "1", ">= 1",
          "pipeline stages: the model cut into this many stages, one per rank of a pipeline group "
          "([pipeline stages](hybrid.md#pipeline-stages))"),
      Key("pipeline.micro_batches", &c.pipeline.micro_batches, std::to_string(pipeline.micro_batches), ">= 1",
          "micro-batches each step's batch is cut into; they flow through the stages one after another "
          "(must divide batch_size)"),
      Key("pipeline.schedule", choice(&c.pipeline.schedule, "pipeline schedule"), name_of(pipeline.schedule),
          "",
          "gpipe: every micro-batch's forward, then every backward; 1f1b: after a warm-up one forward and "
          "one backward alternately, so a stage holds at most as many micro-batches as stages follow it"),
      Key("debug", choice(&c.debug, "debug mode"), "none", "",
          "collectives: before each collective every rank checks that all call the same one "
          "([faults](faults.md#debug-collectives))"),
      Key("on_nonfinite", choice(&c.on_nonfinite, "action"), "stop", "",
          "a step whose gradients are not finite: stop (exit 3, the last good checkpoint kept) or skip its "
          "update ([checkpoints](checkpoints.md#non-finite-gradients))"),

      Key("checkpoint.every_epochs", &c.checkpoint.every_epochs, "1", ">= 0",
          "a checkpoint after every N-th epoch, in `<output.dir>/checkpoints` "
          "([checkpoints](checkpoints.md))")
          .zero_means("only on a signal"),
      Key("checkpoint.keep_last", &c.checkpoint.keep_last, "3", ">= 0", "older checkpoints are removed")
          .zero_means("all"),

      Key("output.dir", &c.output.dir, "runs/<config file stem>", "",
          "where metrics, summary, model and checkpoints go"),
  };
}

std::vector<Rule> config_rules() {
  return {
      {"optimizer.nesterov",
       [](const Config& c) -> std::string {
         if (!c.optimizer.nesterov || c.optimizer.momentum > 0) return "";
         return "key 'optimizer.nesterov': Nesterov momentum needs momentum > 0";
       }},
      {"schedule.min_lr",
       [](const Config& c) -> std::string {
         if (c.schedule.min_lr <= c.optimizer.lr) return "";
         return "key 'schedule.min_lr': expected a number in [0, optimizer.lr = " +
                format_number(c.optimizer.lr) + "], got '" + format_number(c.schedule.min_lr) + "'";
       }},
      // Compression acts in the between-hosts stage of the hierarchical all-reduce.
      {"distributed.compress",
       [](const Config& c) -> std::string {
         if (c.distributed.ddp.compress == dist::Compression::none ||
             c.distributed.hierarchical != dist::Hierarchical::off)
           return "";
         return "key 'distributed.compress': bf16 compresses the between-hosts stage of the hierarchical "
                "all-reduce, so it needs distributed.hierarchical: auto or true, got false";
       }},
      // The sharded step all-gathers the parameters, which a captured graph cannot hold.
      {"optimizer.shard",
       [](const Config& c) -> std::string {
         if (!c.optimizer.shard || !c.cuda_graphs) return "";
         return "key 'optimizer.shard': a sharded optimizer cannot run in a CUDA graph; set cuda_graphs: "
                "false";
       }},
      // Compression covers the all-reduce; a sharded optimizer's gradients are reduce-scattered.
      {"distributed.compress",
       [](const Config& c) -> std::string {
         if (!c.optimizer.shard || c.distributed.ddp.compress == dist::Compression::none) return "";
         return "key 'distributed.compress': bf16 compresses all-reduced gradients, but optimizer.shard: true "
                "reduce-scatters them; set distributed.compress: none";
       }},
      // A replayed graph applies its update whatever the gradients held; it cannot skip one.
      {"cuda_graphs",
       [](const Config& c) -> std::string {
         if (!c.cuda_graphs || c.on_nonfinite != NonfiniteAction::skip) return "";
         return "cuda_graphs: true needs on_nonfinite: stop (a captured step cannot skip its update), got "
                "on_nonfinite: skip";
       }},
      {"pipeline.micro_batches",
       [](const Config& c) -> std::string {
         if (c.parallel.pp == 1 || c.batch_size % c.pipeline.micro_batches == 0) return "";
         return "key 'pipeline.micro_batches': " + std::to_string(c.pipeline.micro_batches) +
                " micro-batches do not divide batch_size " + std::to_string(c.batch_size);
       }},
  };
}

}  // namespace dpt::io
