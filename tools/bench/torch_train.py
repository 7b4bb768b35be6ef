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


MODELS = {"mnist_cnn": mnist_cnn}


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
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
    x = torch.randn(batch, c, h, w)
    y = torch.arange(batch) % 10

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

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
