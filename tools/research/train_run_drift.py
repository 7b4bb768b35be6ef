# How far two runs of test_cuda_train_run.cpp's training drift apart when one of them sums
# in another order: PyTorch on the CPU, the test's run emulated (ResNet-8 with shortcut A on
# 384 random-byte 3x16x16 images with random labels of 4 classes, batch 32, 2 epochs of 12
# steps, SGD lr 0.05 nesterov momentum 0.9 weight decay 5e-4, crop+flip augmentation, EMA
# 0.9 for evaluation on 64 held-out images). Run B multiplies every op's output and every
# activation gradient by 1 + REL * N(0,1) (another summation order), from step FROM on;
# with --bf16 both runs round activations, weights and activation gradients to bf16. Prints
# per seed the largest relative change of the per-epoch train/test loss, the test-accuracy
# change, and for each weight tolerance (rtol, atol) the worst |a - b| / (rtol |a| + atol)
# over the saved state (> 1 fails the test). Usage (PyTorch at /usr/bin/python3):
#   /usr/bin/python3 tools/research/train_run_drift.py [--noise REL] [--from STEP] [--bf16] [--seeds K]
import argparse

import torch
import torch.nn.functional as F
from sim_rounding import rounding

args = argparse.ArgumentParser()
args.add_argument("--noise", type=float, default=1e-6)
args.add_argument("--from", dest="start", type=int, default=0)
args.add_argument("--bf16", action="store_true")
args.add_argument("--steps", type=int, default=12, help="steps per epoch (max_steps_per_epoch)")
args.add_argument("--seeds", type=int, default=5)
args.add_argument("--drop-momentum", type=int, default=-1, help="run B instead loses its momentum at this step")
args = args.parse_args()
torch.set_num_threads(1)
STATE = {"noisy": False, "gen": None}


def perturb(t):
    if STATE["noisy"]:
        t = t * (1 + args.noise * torch.randn(t.shape, generator=STATE["gen"]))
    return t.to(torch.bfloat16).to(torch.float32) if args.bf16 else t


q = rounding(perturb)


def make_model(seed):
    torch.manual_seed(seed)
    convs = [torch.nn.init.kaiming_normal_(torch.empty(16, 3, 3, 3))]
    c = 16
    for out in (16, 32, 64):
        convs += [torch.nn.init.kaiming_normal_(torch.empty(out, c, 3, 3)),
                  torch.nn.init.kaiming_normal_(torch.empty(out, out, 3, 3))]
        c = out
    widths = [16, 16, 16, 32, 32, 64, 64]
    p = {f"conv{i}": w for i, w in enumerate(convs)}
    for i, w in enumerate(widths):
        p[f"bn{i}.w"], p[f"bn{i}.b"] = torch.ones(w), torch.zeros(w)
    fc = torch.nn.Linear(64, 4)
    p["fc.w"], p["fc.b"] = fc.weight.detach().clone(), fc.bias.detach().clone()
    buffers = {}
    for i, w in enumerate(widths):
        buffers[f"bn{i}.mean"], buffers[f"bn{i}.var"] = torch.zeros(w), torch.ones(w)
    return p, buffers


def forward(p, buf, x, train):
    def bn(h, i):
        return q(F.batch_norm(h, buf[f"bn{i}.mean"], buf[f"bn{i}.var"], p[f"bn{i}.w"], p[f"bn{i}.b"],
                              training=train, momentum=0.1))

    h = F.relu(bn(q(F.conv2d(q(x), q(p["conv0"]), padding=1)), 0))
    c, k = 16, 1
    for stage, out in enumerate((16, 32, 64)):
        s = 1 if stage == 0 else 2
        y = F.relu(bn(q(F.conv2d(h, q(p[f"conv{k}"]), stride=s, padding=1)), k))
        y = bn(q(F.conv2d(y, q(p[f"conv{k + 1}"]), padding=1)), k + 1)
        pad = (out - c) // 2
        shortcut = h if s == 1 else F.pad(h[:, :, ::2, ::2], (0, 0, 0, 0, pad, pad))
        h = q(F.relu(y + shortcut))
        c, k = out, k + 2
    return q(F.linear(q(h.mean((2, 3))), q(p["fc.w"]), p["fc.b"]))


def augment(x, gen):
    out = torch.empty_like(x)
    padded = F.pad(x, (4, 4, 4, 4))
    for i in range(x.shape[0]):
        dy, dx = (int(v) for v in torch.randint(0, 9, (2,), generator=gen))
        img = padded[i, :, dy:dy + 16, dx:dx + 16]
        out[i] = img.flip(2) if torch.randint(0, 2, (1,), generator=gen).item() else img
    return out


def run(seed, noisy):
    data_gen = torch.Generator().manual_seed(1000 + seed)
    images = (torch.randint(0, 256, (448, 3, 16, 16), generator=data_gen).float() / 255 - 0.5) / 0.2898
    labels = torch.randint(0, 4, (448,), generator=data_gen)
    train_x, train_y, test_x, test_y = images[:384], labels[:384], images[384:], labels[384:]
    p, buf = make_model(seed)
    p = {k: v.clone().requires_grad_(True) for k, v in p.items()}
    mom = {k: torch.zeros_like(v) for k, v in p.items()}
    ema = {k: v.detach().clone() for k, v in p.items()}
    STATE["gen"] = torch.Generator().manual_seed(7 + seed)
    aug_gen = torch.Generator().manual_seed(99 + seed)
    train_loss, test_loss, test_acc, step = [], [], [], 0
    for epoch in range(2):
        order = torch.randperm(384, generator=aug_gen)
        total = 0.0
        for b in range(args.steps):
            STATE["noisy"] = noisy and step >= args.start and args.drop_momentum < 0
            if noisy and step == args.drop_momentum:
                mom = {k: torch.zeros_like(v) for k, v in p.items()}
            idx = order[b * 32:(b + 1) * 32]
            loss = F.cross_entropy(forward(p, buf, augment(train_x[idx], aug_gen), True), train_y[idx])
            for v in p.values():
                v.grad = None
            loss.backward()
            total += loss.item()
            with torch.no_grad():
                for k, v in p.items():
                    decay = 5e-4 if v.dim() > 1 else 0.0
                    g = v.grad + decay * v
                    mom[k].mul_(0.9).add_(g)
                    v.sub_(0.05 * (g + 0.9 * mom[k]))
                    d = min(0.9, (1 + step) / (10 + step))
                    ema[k].mul_(d).add_((1 - d) * v)
            step += 1
        train_loss.append(total / args.steps)
        with torch.no_grad():
            logits = forward(ema, buf, test_x, False)
            test_loss.append(F.cross_entropy(logits, test_y).item())
            test_acc.append((logits.argmax(1) == test_y).float().mean().item())
    state = {k: v.detach() for k, v in p.items()}
    state.update(buf)
    return train_loss, test_loss, test_acc, state


TOLERANCES = [(1e-2, 1e-3), (1e-3, 1e-5)]
for seed in range(args.seeds):
    a, b = run(seed, False), run(seed, True)
    rel = lambda x, y: max(abs(u - v) / abs(u) for u, v in zip(x, y))
    worst = []
    for rtol, atol in TOLERANCES:
        worst.append(max(((a[3][k] - b[3][k]).abs() / (rtol * a[3][k].abs() + atol)).max().item() for k in a[3]))
    if __import__("os").environ.get("DRIFT_DEBUG"):
        for k in a[3]:
            d = (a[3][k] - b[3][k]).abs(); r = d / (1e-2 * a[3][k].abs() + 1e-3); i = r.argmax()
            print(k, f"{r.max().item():.2f}", f"absdiff {d.flatten()[i].item():.2e} val {a[3][k].flatten()[i].item():.3e}")
    print(f"seed {seed}: train_loss rel {rel(a[0], b[0]):.1e} test_loss rel {rel(a[1], b[1]):.1e} "
          f"test_acc change {max(abs(u - v) for u, v in zip(a[2], b[2])):.4f} weights/tolerance "
          + " ".join(f"({r:g},{t:g}): {w:.2f}" for (r, t), w in zip(TOLERANCES, worst))
          + f" worst |a - b| {max((a[3][k] - b[3][k]).abs().max().item() for k in a[3]):.1e}"
          + f" worst per-tensor rel L2 {max(((a[3][k] - b[3][k]).norm() / a[3][k].norm()).item() for k in a[3]):.1e}")
