# How far test_cuda_train_run.cpp's training drifts when only the summation order changes,
# measured with dpt itself on the CPU: the test's config (train_runner.h) with `threads: 1`
# and `threads: 2`, for seeds 0..K-1. Prints per seed the largest relative change of the
# per-epoch train and test loss, and the largest change of a parameter, of a batch-norm
# running statistic and of the final test accuracy. The GPU run of the
# test must stay within what this does (a wrong kernel moves far more).
#   python3 tools/research/train_run_threads.py [--build build] [--seeds 9]
import argparse
import json
import os
import struct
import subprocess
import tempfile

CONFIG = """model: {{name: resnet_cifar, depth: 8}}
dataset: {{name: synthetic, shape: [3, 16, 16], classes: 4, size: 384, augment: true}}
epochs: 2
batch_size: 32
eval_batch_size: 64
threads: {threads}
seed: {seed}
ema_decay: 0.9
optimizer: {{name: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 5.0e-4}}
output: {{dir: {out}}}
device: cpu
"""


def safetensors(path):
    """name -> list of float32 values (little-endian f32 tensors only)."""
    data = open(path, "rb").read()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = struct.unpack(f"<{(end - begin) // 4}f", body[begin:end])
    return out


def run(build, seed, threads, root):
    out = os.path.join(root, f"s{seed}_t{threads}")
    config = os.path.join(root, "config.yaml")
    with open(config, "w") as f:
        f.write(CONFIG.format(threads=threads, seed=seed, out=out))
    subprocess.run([os.path.join(build, "train"), config], check=True, stdout=subprocess.DEVNULL)
    metrics = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    return safetensors(os.path.join(out, "model.safetensors")), metrics


args = argparse.ArgumentParser()
args.add_argument("--build", default="build")
args.add_argument("--seeds", type=int, default=9)
args = args.parse_args()
with tempfile.TemporaryDirectory() as root:
    for seed in range(args.seeds):
        (a, ma), (b, mb) = (run(args.build, seed, t, root) for t in (1, 2))
        def worst(keep):
            return max(abs(x - y) for name in a if keep(name) for x, y in zip(a[name], b[name]))
        def loss_change(key):
            return max(abs(x[key] - y[key]) / abs(x[key]) for x, y in zip(ma, mb))
        acc_a, acc_b = ma[-1]["test_acc"], mb[-1]["test_acc"]
        print(f"seed {seed}: train_loss rel {loss_change('train_loss'):.1e}, "
              f"test_loss rel {loss_change('test_loss'):.1e}, "
              f"parameters max |a - b| {worst(lambda n: 'running_' not in n):.4f}, "
              f"running statistics {worst(lambda n: 'running_' in n):.4f}, "
              f"test_acc {acc_a:.4f} -> {acc_b:.4f} ({round(abs(acc_a - acc_b) * 64)} of 64)")
