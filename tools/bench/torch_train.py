"""PyTorch side of vs_torch.sh and gpu_check.sh: the same model, batch, optimizer and thread
count as bench_train.cpp, on one fixed synthetic batch. Prints one JSON line.
    torch_train.py [model] [batch] [threads] [steps] [channels height width]
                   [--device cpu|cuda] [--precision fp32|bf16] [--channels-last] [--warmup N]
On CUDA: eager mode with torch.autocast(bfloat16) for bf16, the model and batch in
torch.channels_last for --channels-last, cudnn.benchmark on (PyTorch's fastest eager
setting for fixed shapes), TF32 off (fp32 is IEEE f32 on both sides), and the timed
steps between two CUDA events."""
import argparse, contextlib, json, resource, time

import torch
import torch.nn as nn


def mnist_cnn(c, h, w):
    return nn.Sequential(
        nn.Conv2d(c, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * (h // 4) * (w // 4), 128), nn.ReLU(), nn.Linear(128, 10))


class BasicBlock(nn.Module):
    """models/blocks.cpp's BasicBlock: shortcut "A" subsamples and appends zero channels
    (dpt's shortcut_pad), "B" is a 1x1 conv + BN projection; identity when the shape holds."""

    def __init__(self, cin, cout, stride, shortcut):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.pad = None
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            if shortcut == "A":
                self.pad = (stride, cout - cin)
            else:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        if self.pad:
            s, extra = self.pad
            return torch.relu(h + nn.functional.pad(x[:, :, ::s, ::s], (0, 0, 0, 0, 0, extra)))
        return torch.relu(h + self.shortcut(x))


def resnet(c, stem, widths, blocks, shortcut):
    layers = [nn.Conv2d(c, stem, 3, 1, 1, bias=False), nn.BatchNorm2d(stem), nn.ReLU()]
    cin = stem
    for i, width in enumerate(widths):
        for b in range(blocks):
            layers.append(BasicBlock(cin, width, 2 if i > 0 and b == 0 else 1, shortcut))
            cin = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10))


MODELS = {
    "mnist_cnn": mnist_cnn,
    "resnet20": lambda c, h, w: resnet(c, 16, [16, 32, 64], 3, "A"),  # He et al. 2016, 269,722 parameters
    "resnet18": lambda c, h, w: resnet(c, 64, [64, 128, 256, 512], 2, "B"),  # CIFAR variant, 11,173,962
}


def sgd_step(model, x, y, autocast=contextlib.nullcontext):
    """One training step on a fixed batch with bench_train.cpp's optimizer: SGD, lr 0.01,
    momentum 0.9, Nesterov, weight decay 5e-4. Shared with torch_ddp.py. autocast() wraps
    the forward pass and the loss only, as PyTorch's AMP recipe has it."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)

    def step():
        with autocast():
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default="mnist_cnn", choices=sorted(MODELS))
    p.add_argument("batch", nargs="?", type=int, default=128)
    p.add_argument("threads", nargs="?", type=int, default=0)
    p.add_argument("steps", nargs="?", type=int, default=30)
    p.add_argument("shape", nargs="*", type=int, default=[1, 28, 28], help="channels height width")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    if len(a.shape) != 3:
        p.error("shape: expected channels height width")
    if (a.precision == "bf16" or a.channels_last) and not a.device.startswith("cuda"):
        p.error("--precision bf16 and --channels-last need --device cuda")
    return a


def main():
    a = parse()
    c, h, w = a.shape
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
        # fp32 means IEEE f32, as in dpt (whose TF32 is off unless DPT_CUDA_TF32=1).
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    memory_format = torch.channels_last if a.channels_last else torch.contiguous_format
    model = MODELS[a.model](c, h, w).to(device=device, memory_format=memory_format)
    x = torch.randn(a.batch, c, h, w).to(device=device, memory_format=memory_format)
    y = (torch.arange(a.batch) % 10).to(device)
    bf16 = lambda: torch.autocast("cuda", dtype=torch.bfloat16)  # noqa: E731
    step = sgd_step(model, x, y, bf16 if a.precision == "bf16" else contextlib.nullcontext)

    def run(n):
        for _ in range(n):
            step()

    run(a.warmup)
    if cuda:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        run(a.steps)
        stop.record()
        stop.synchronize()
        seconds = start.elapsed_time(stop) / 1e3
    else:
        begin = time.perf_counter()
        run(a.steps)
        seconds = time.perf_counter() - begin
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"framework": "pytorch " + torch.__version__, "model": a.model, "batch": a.batch,
                      "threads": torch.get_num_threads(), "device": str(device), "precision": a.precision,
                      "channels_last": a.channels_last, "ms_per_step": round(seconds / a.steps * 1e3, 2),
                      "images_per_sec": round(a.batch * a.steps / seconds, 1), "peak_rss_mb": round(rss_mb, 1)}))


if __name__ == "__main__":
    main()
