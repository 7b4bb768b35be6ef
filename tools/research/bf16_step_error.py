# How far one training step's parameter gradients move when a model runs in bf16 as dpt's
# CUDA backend does (activations, weights and activation gradients rounded to bf16, sums in
# f32) or with f32 rounding-level noise (--f32-noise REL: each op's output times 1 + REL * N(0,1),
# what another summation order does), against plain f32: per-tensor relative L2 error,
# several seeds. PyTorch on the CPU; justifies the bounds of test_cuda_mixed.cpp's and
# test_cuda_model.cpp's whole-model steps. Usage (PyTorch at /usr/bin/python3):
#   /usr/bin/python3 tools/research/bf16_step_error.py mnist_cnn|resnet20 [--batch N] [--seeds K] [--f32-noise REL]
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from sim_rounding import rounding

args = argparse.ArgumentParser()
args.add_argument("model", choices=["mnist_cnn", "resnet20"])
args.add_argument("--batch", type=int, default=32)
args.add_argument("--seeds", type=int, default=8)
args.add_argument("--f32-noise", type=float, default=0.0)
args = args.parse_args()


def perturb(t):
    if args.f32_noise:
        return t * (1 + args.f32_noise * torch.randn_like(t))
    return t.to(torch.bfloat16).to(torch.float32)


round_both_ways = rounding(perturb)


def q(x, on):
    return round_both_ways(x) if on else x


def mnist_params():
    mods = [nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3), nn.Linear(64 * 49, 128), nn.Linear(128, 10)]
    return [t.detach() for m in mods for t in (m.weight, m.bias)], (1, 28)


def mnist_forward(p, x, on):
    h = q(x, on)
    h = F.max_pool2d(F.relu(q(F.conv2d(h, q(p[0], on), p[1], padding=1), on)), 2)
    h = F.max_pool2d(F.relu(q(F.conv2d(h, q(p[2], on), p[3], padding=1), on)), 2).flatten(1)
    h = F.relu(q(F.linear(h, q(p[4], on), p[5]), on))
    return q(F.linear(h, q(p[6], on), p[7]), on)


def resnet_params():
    p = [nn.Conv2d(3, 16, 3, bias=False).weight.detach()]
    c = 16
    for out in (16, 32, 64):
        for _ in range(3):
            p += [nn.Conv2d(c, out, 3, bias=False).weight.detach(), nn.Conv2d(out, out, 3, bias=False).weight.detach()]
            c = out
    p += [t for _ in range(19) for t in (torch.ones(0), torch.zeros(0))]  # placeholders, sized below
    fc = nn.Linear(64, 10)
    widths = [16] + [w for w in (16, 32, 64) for _ in range(6)]
    for i, w in enumerate(widths):
        p[19 + 2 * i], p[20 + 2 * i] = torch.ones(w), torch.zeros(w)
    return p + [fc.weight.detach(), fc.bias.detach()], (3, 32)


def resnet_forward(p, x, on):
    def bn(h, i):
        return q(F.batch_norm(h, None, None, p[19 + 2 * i], p[20 + 2 * i], training=True), on)

    h = F.relu(bn(q(F.conv2d(q(x, on), q(p[0], on), padding=1), on), 0))
    k, c = 1, 16
    for stage, out in enumerate((16, 32, 64)):
        for b in range(3):
            s = 2 if b == 0 and stage > 0 else 1
            y = F.relu(bn(q(F.conv2d(h, q(p[k], on), stride=s, padding=1), on), k))
            y = bn(q(F.conv2d(y, q(p[k + 1], on), padding=1), on), k + 1)
            pad = (out - c) // 2
            shortcut = h if s == 1 and c == out else F.pad(h[:, :, ::2, ::2], (0, 0, 0, 0, pad, pad))
            h = q(F.relu(y + shortcut), on)
            k, c = k + 2, out
    return q(F.linear(q(h.mean((2, 3)), on), q(p[57], on), p[58]), on)


make, forward = (mnist_params, mnist_forward) if args.model == "mnist_cnn" else (resnet_params, resnet_forward)
worst = 0.0
for seed in range(args.seeds):
    torch.manual_seed(seed)
    base, (channels, size) = make()
    x = torch.rand(args.batch, channels, size, size) * 2 - 1
    labels = torch.randint(0, 10, (args.batch,))
    results = []
    for on in (False, True):
        p = [t.clone().requires_grad_(True) for t in base]
        loss = F.cross_entropy(forward(p, x, on), labels)
        loss.backward()
        results.append((loss.item(), [t.grad for t in p]))
    (loss_ref, g_ref), (loss_q, g_q) = results
    rel = [((a - b).norm() / b.norm()).item() for a, b in zip(g_q, g_ref)]
    worst = max(worst, max(rel))
    print(f"seed {seed}: loss rel error {abs(loss_q - loss_ref) / abs(loss_ref):.1e}, gradient rel L2 "
          f"max {max(rel):.3f} median {sorted(rel)[len(rel) // 2]:.3f}")
print(f"worst gradient rel L2 over {args.seeds} seeds: {worst:.3f}")
