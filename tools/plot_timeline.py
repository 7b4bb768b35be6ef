#!/usr/bin/python3
"""One recorded step of a train --timeline trace as a picture: a row per rank and track
(compute: forward, backward, the exposed all-reduce wait, optimizer; one row per DDP
bucket's all-reduce), so the overlap shows in a README as it does in chrome://tracing.
    tools/plot_timeline.py TRACE.json [-o timeline.png] [--step K]
K counts the recorded steps from 0 (default: the middle one); times are from rank 0's
forward start of that step."""
import argparse
import os

import plotting

COLORS = {"data wait": "#bbbbbb", "forward": "#4c72b0", "backward": "#55a868", "allreduce wait": "#c44e52",
          "optimizer": "#8172b2", "allreduce": "#dd8452"}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("-o", "--output")
    parser.add_argument("--step", type=int)
    args = parser.parse_args()
    if not os.path.isfile(args.trace):
        plotting.fail(f"{args.trace} not found (expected a trace from train --timeline)")
    events = plotting.read_json(args.trace)["traceEvents"]
    rows = {(e["pid"], e["tid"]): f"rank {e['pid']} {e['args']['name']}" for e in events
            if e.get("name") == "thread_name"}
    spans = [e for e in events if e["ph"] == "X"]
    forwards = sorted(e["ts"] for e in spans if e["name"] == "forward" and e["pid"] == 0)
    if not forwards:
        plotting.fail(f"{args.trace}: no forward spans on rank 0")
    k = len(forwards) // 2 if args.step is None else args.step
    if not 0 <= k < len(forwards):
        plotting.fail(f"--step {k}: the trace holds steps 0 to {len(forwards) - 1}")
    begin = forwards[k]
    end = forwards[k + 1] if k + 1 < len(forwards) else max(e["ts"] + e["dur"] for e in spans)
    order = sorted(rows)
    fig, (ax,) = plotting.figure(1, width=10.0, height=0.45 * len(order) + 1.2)
    spans.sort(key=lambda e: e["name"] not in COLORS)  # phases first, backward's nodes on top
    for y, key in enumerate(order):
        for e in spans:
            if (e["pid"], e["tid"]) != key or e["ts"] + e["dur"] < begin or e["ts"] > end:
                continue
            phase = e["name"] in COLORS
            # Backward's nodes sit inside its span: drawn thinner on top, in shades by op.
            height, color = (0.8, COLORS[e["name"]]) if phase else (0.4, "#2d6a3e")
            ax.broken_barh([((e["ts"] - begin) / 1e3, e["dur"] / 1e3)], (y - height / 2, height),
                           facecolors=color, edgecolor="white" if not phase else None, linewidth=0.3)
    ax.set_yticks(range(len(order)), [rows[k] for k in order], fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel(f"ms from rank 0's forward (step {k} of those recorded)")
    handles = [plotting.plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    handles.append(plotting.plt.Rectangle((0, 0), 1, 1, color="#2d6a3e"))
    ax.legend(handles, list(COLORS) + ["backward node"], fontsize="x-small", ncol=len(COLORS) + 1,
              loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    output = args.output or os.path.splitext(args.trace)[0] + ".png"
    plotting.save(fig, output)
    print(output)


if __name__ == "__main__":
    main()
