"""What the plotting tools share: reading a run's files, one look for every figure (small
PNGs, matplotlib without a display), and the training curves that plot_run.py draws and
scaling_report.py reuses. Debian's python3-matplotlib (tools/setup.sh installs it)."""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # no display on these machines
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import matplotlib.ticker  # noqa: E402


def fail(message):
    """Bad input: one line on stderr, exit code 2 (as train does)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def read_jsonl(path):
    """The JSON objects of a .jsonl file, one per non-empty line."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_json(path):
    with open(path) as f:
        return json.load(f)


def figure(panels, width=4.0, height=3.2):
    """A row of `panels` axes sized for a README (about 100 KB as PNG)."""
    fig, axes = plt.subplots(1, panels, figsize=(width * panels, height), squeeze=False)
    for ax in axes[0]:
        ax.grid(True, alpha=0.3)
    return fig, list(axes[0])


def save(fig, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_curves(axes, metrics, label=None):
    """Train loss, test accuracy and learning rate against epoch on three axes."""
    epochs = [m["epoch"] for m in metrics]
    for ax, key, title in zip(axes, ("train_loss", "test_acc", "lr"),
                              ("train loss", "test accuracy", "learning rate")):
        ax.plot(epochs, [m[key] for m in metrics], marker="o", markersize=3, label=label)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_title(title)
    if label is not None:
        axes[1].legend(fontsize="small")
