"""PyTorch DDP (gloo, CPU) side of ddp_scaling.sh: the same model, per-rank batch, threads
and optimizer as bench_ddp.cpp. Started by mpirun, which gives each process its rank;
gloo meets on loopback. Rank 0 prints one JSON line.
    mpirun -np N python3 torch_ddp.py [model] [batch per rank] [threads] [steps] [port]"""
import json, os, sys, time

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(__file__))
from torch_train import MODELS, sgd_step  # noqa: E402


def main():
    a = sys.argv[1:]
    name = a[0] if len(a) > 0 else "mnist_cnn"
    batch = int(a[1]) if len(a) > 1 else 64
    threads = int(a[2]) if len(a) > 2 else 1
    steps = int(a[3]) if len(a) > 3 else 40
    port = a[4] if len(a) > 4 else "29517"
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    c, hw = (1, 28) if name == "mnist_cnn" else (3, 32)
    model = MODELS[name](c, hw, hw)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        model = nn.parallel.DistributedDataParallel(model)
    torch.manual_seed(1 + rank)
    x = torch.randn(batch, c, hw, hw)
    y = (torch.arange(batch) + rank) % 10
    step = sgd_step(model, x, y)

    for _ in range(5):
        step()
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if world > 1:
        dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"framework": "pytorch " + torch.__version__ + " (gloo)", "model": name, "np": world,
                          "batch_per_rank": batch, "threads": threads, "ms_per_step": round(seconds / steps * 1e3, 2),
                          "images_per_sec": round(batch * world * steps / seconds, 1)}))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
