#!/usr/bin/python3
"""The tables and figure of a scaling sweep (tools/scaling.sh writes the runs): reads
FOLDER/np<N>/r<k>/{summary.json,metrics.jsonl} and FOLDER/sweep.json, keeps the fastest
repeat of each process count, and writes FOLDER/results.csv, results.md and scaling.png
(throughput and scaling efficiency against np with the ideal drawn, and where each step's
time goes).
    tools/scaling_report.py runs/scaling/default
images/s is the steady state: global batch / mean step time after train's warm-up steps.
Scaling efficiency at np = (images/s per process at np) / (the same at the smallest np):
for weak scaling (batch per process fixed) and strong scaling (global batch fixed) alike."""
import csv
import os
import re
import sys

import plotting

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))
from report import best_by  # noqa: E402  (tools/bench/report.py: the best run of each kind)

PHASES = [("data_ms", "data wait"), ("forward_ms", "forward"), ("backward_ms", "backward"),
          ("comm_wait_ms", "exposed comm"), ("optimizer_ms", "optimizer")]
COLUMNS = ["np", "global_batch", "images_per_sec", "step_ms"] + [k for k, _ in PHASES] + [
    "efficiency", "final_test_acc", "best_test_acc", "time_to_target_s", "oversubscribed", "run"]


def load_runs(folder):
    """Every repeat's summary, with its metrics, as dicts."""
    runs = []
    for np_dir in sorted(os.listdir(folder)):
        if not re.fullmatch(r"np\d+", np_dir):
            continue
        for rep in sorted(os.listdir(os.path.join(folder, np_dir))):
            run = os.path.join(folder, np_dir, rep)
            if not os.path.isfile(os.path.join(run, "summary.json")):
                continue
            summary = plotting.read_json(os.path.join(run, "summary.json"))
            summary["metrics"] = plotting.read_jsonl(os.path.join(run, "metrics.jsonl"))
            summary["np"] = summary["world_size"]
            summary["run"] = f"{np_dir}/{rep}"  # the repeat's folder: its timeline, metrics and log
            # Steady state: the mean step after train's warm-up steps (summary.json's own
            # images_per_sec also counts the first steps, which build caches and buckets).
            summary["images_per_sec"] = summary["global_batch"] / summary["step_ms"] * 1e3
            runs.append(summary)
    if not runs:
        plotting.fail(f"no runs in {folder} (expected np<N>/r<k>/summary.json from tools/scaling.sh)")
    return runs


def time_to_target(metrics, target):
    """Seconds from the start of training to the end of the first epoch at `target` test accuracy."""
    for m in metrics:
        if target is not None and m["test_acc"] >= target:
            return m["elapsed_s"]
    return None


def table(runs, sweep):
    best = best_by(runs, lambda r: r["np"])
    base = best[min(best)]
    rows = []
    for n in sorted(best):
        r = best[n]
        row = {k: r[k] for k in ("np", "global_batch", "images_per_sec", "step_ms", "final_test_acc", "best_test_acc",
                                 "run")}
        row.update({k: r[k] for k, _ in PHASES})
        row["efficiency"] = (r["images_per_sec"] / n) / (base["images_per_sec"] / base["np"])
        row["time_to_target_s"] = time_to_target(r["metrics"], sweep.get("target"))
        row["oversubscribed"] = n in sweep.get("oversubscribed", [])
        rows.append(row)
    return rows


def fmt(value, digits):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow({k: fmt(row[k], 4) for k in COLUMNS})


def markdown(rows, sweep, name):
    target = sweep.get("target")
    head = ["np", "global batch", "images/s", "step ms"] + [f"{label} ms" for _, label in PHASES] + [
        "efficiency", "final acc", "best acc"] + ([f"time to {target:.3f} s"] if target else [])
    lines = [f"Scaling of `{name}` ({sweep['mode']} scaling, {sweep['threads_per_rank']} thread(s) per rank on "
             f"{sweep['cores']} cores; best of {sweep['repeats']} repeat(s); load average before/after "
             f"{sweep['load_average']['before']} / {sweep['load_average']['after']}; {sweep['date']}).",
             f"`{sweep['command']}`", ""]
    if sweep.get("waited_for_idle"):
        busy = sweep.get("runs_started_busy", 0)
        lines[-1:] = [f"Each run started once the cores had been at least 90% idle for 2 s"
                      f"{f' (except {busy}, after 10 minutes of waiting)' if busy else ''}.", ""]
    if sweep.get("oversubscribed"):
        lines[-1:] = [f"np {', '.join(map(str, sweep['oversubscribed']))}: more processes than "
                      f"{sweep['slots']} slot(s), oversubscribed (ranks share cores).", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{r['np']}{' (over)' if r['oversubscribed'] else ''}", str(r["global_batch"]),
                 f"{r['images_per_sec']:.0f}", f"{r['step_ms']:.2f}"] + [f"{r[k]:.2f}" for k, _ in PHASES] + [
                    f"{r['efficiency']:.3f}", f"{r['final_test_acc']:.4f}", f"{r['best_test_acc']:.4f}"]
        if target:
            cells.append(fmt(r["time_to_target_s"], 1) or "not reached")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(rows, path, name):
    fig, (thr, eff, parts) = plotting.figure(3)
    nps = [r["np"] for r in rows]
    base = rows[0]
    ideal = [base["images_per_sec"] * n / base["np"] for n in nps]
    thr.plot(nps, ideal, "k--", label="ideal (linear)")
    thr.plot(nps, [r["images_per_sec"] for r in rows], "o-", label="measured")
    eff.axhline(1.0, color="k", linestyle="--", label="ideal")
    eff.plot(nps, [r["efficiency"] for r in rows], "o-", label="measured")
    for r in rows:
        if r["oversubscribed"]:
            eff.annotate("oversubscribed", (r["np"], r["efficiency"]), textcoords="offset points", xytext=(-40, 8),
                         fontsize="x-small")
    bottom = [0.0] * len(rows)
    for key, label in PHASES:
        values = [r[key] for r in rows]
        parts.bar([str(n) for n in nps], values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values)]
    for ax in (thr, eff):
        ax.set_xscale("log", base=2)
        ax.set_xticks(nps, [str(n) for n in nps])
        ax.set_xlabel("processes")
    thr.set_ylim(bottom=0)
    thr.set_title(f"{name}: images/s")
    eff.set_title("scaling efficiency")
    eff.set_ylim(0, 1.1)
    parts.set_title("step time (ms, mean per step)")
    parts.set_xlabel("processes")
    for ax in (thr, eff, parts):
        ax.legend(fontsize="x-small")
    plotting.save(fig, path)


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        plotting.fail(f"usage: {sys.argv[0]} FOLDER (the folder tools/scaling.sh wrote)")
    folder = sys.argv[1]
    sweep_path = os.path.join(folder, "sweep.json")
    if not os.path.isfile(sweep_path):
        plotting.fail(f"{sweep_path} not found (tools/scaling.sh writes it)")
    sweep = plotting.read_json(sweep_path)
    rows = table(load_runs(folder), sweep)
    name = os.path.basename(os.path.normpath(folder))
    write_csv(rows, os.path.join(folder, "results.csv"))
    text = markdown(rows, sweep, name)
    with open(os.path.join(folder, "results.md"), "w") as f:
        f.write(text)
    plot(rows, os.path.join(folder, "scaling.png"), name)
    print(text, end="")
    print(f"wrote {folder}/results.csv, results.md, scaling.png")


if __name__ == "__main__":
    main()
