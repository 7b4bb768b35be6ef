#!/usr/bin/python3
"""Training curves of one or more runs: train loss, test accuracy and learning rate
against epoch, from each run folder's metrics.jsonl (what train writes).
    tools/plot_run.py runs/default [runs/other ...] [-o curves.png]
Writes RUN/curves.png for one run, or the -o path (default runs/curves.png) for several."""
import argparse
import os

import plotting


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run folders holding metrics.jsonl")
    parser.add_argument("-o", "--output", help="PNG to write")
    args = parser.parse_args()
    fig, axes = plotting.figure(3)
    for run in args.runs:
        path = os.path.join(run, "metrics.jsonl")
        if not os.path.isfile(path):
            plotting.fail(f"{path} not found (expected a run folder written by train)")
        metrics = plotting.read_jsonl(path)
        if not metrics:
            plotting.fail(f"{path} holds no epochs")
        # Several runs: named by their last two folders (np2/r1 in a scaling sweep).
        label = "/".join(os.path.normpath(run).split(os.sep)[-2:]) if len(args.runs) > 1 else None
        plotting.plot_curves(axes, metrics, label=label)
    output = args.output or (os.path.join(args.runs[0], "curves.png") if len(args.runs) == 1 else "runs/curves.png")
    plotting.save(fig, output)
    print(output)


if __name__ == "__main__":
    main()
