"""PyTorch side of vs_torch.sh: the same model, batch, optimizer and thread count as
bench_train.cpp, on one fixed synthetic batch. Prints one JSON line.
    torch_train.py [model] [batch] [threads] [steps] [channels height width]"""
import json, resource, sys, time

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


def sgd_step(model, x, y):
    """One training step on a fixed batch with bench_train.cpp's optimizer: SGD, lr 0.01,
    momentum 0.9, Nesterov, weight decay 5e-4. Shared with torch_ddp.py."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def main():
    a = sys.argv[1:]
    name = a[0] if len(a) > 0 else "mnist_cnn"
    batch = int(a[1]) if len(a) > 1 else 128
    threads = int(a[2]) if len(a) > 2 else 0
    steps = int(a[3]) if len(a) > 3 else 30
    c, h, w = (int(v) for v in a[4:7]) if len(a) > 6 else (1, 28, 28)
    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = MODELS[name](c, h, w)
    x = torch.randn(batch, c, h, w)
    y = torch.arange(batch) % 10
    step = sgd_step(model, x, y)

    for _ in range(5):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = time.perf_counter() - start
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"framework": "pytorch " + torch.__version__, "model": name, "batch": batch,
                      "threads": torch.get_num_threads(), "ms_per_step": round(seconds / steps * 1e3, 2),
                      "images_per_sec": round(batch * steps / seconds, 1), "peak_rss_mb": round(rss_mb, 1)}))


if __name__ == "__main__":
    main()
