#!/usr/bin/python3
"""The tables and figure of a scaling sweep (tools/scaling.sh writes the runs): reads
FOLDER/sweep.json and each run's FOLDER/<layout>/r<k>/{summary.json,metrics.jsonl,run.json}
(layouts np<N>, <H>x<P>, <H>x<P>-<link>, each -<variant> with variants), keeps the fastest
repeat of each layout, link and variant, with the median and range of the repeats' step
times, and writes FOLDER/results.csv, results.md and scaling.png (throughput and scaling
efficiency against np with the ideal drawn, and where each step's time goes).
    tools/scaling_report.py runs/scaling/default
images/s is the steady state: global batch / mean step time after train's warm-up steps.
Scaling efficiency = (images/s per process) / (the same of the variant's first row: its
smallest np, one host before several, the fastest link first): for weak scaling (batch per
process fixed) and strong scaling (global batch fixed) alike. The median efficiency does
the same with the median step times."""
import csv
import os
import re
import statistics
import sys

import plotting

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))
from report import best_by  # noqa: E402  (tools/bench/report.py: the best run of each kind)

PHASES = [("data_ms", "data wait"), ("forward_ms", "forward"), ("backward_ms", "backward"),
          ("comm_wait_ms", "exposed comm"), ("optimizer_ms", "optimizer")]
COLUMNS = ["layout", "link", "variant", "np", "global_batch", "images_per_sec", "step_ms"] + [k for k, _ in PHASES] + [
    "efficiency", "repeats", "step_ms_median", "step_ms_min", "step_ms_max", "comm_wait_ms_median",
    "efficiency_median", "final_test_acc", "best_test_acc", "time_to_target_s", "oversubscribed", "run"]
_RATE_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def link_bits(link):
    """A link's rate in bit/s for ordering: one host ("") and unlimited ("none") first."""
    m = re.fullmatch(r"([0-9.]+)(kbit|mbit|gbit)", link)
    return -float(m.group(1)) * _RATE_UNITS[m.group(2)] if m else (-2e18 if link == "" else -1e18)


def run_layout(folder, name, run):
    """hosts, processes a host, link ("" for one host) and variant of a run: its run.json
    (tools/scaling.sh writes it), or for an older sweep's np<N> folder, one host of N."""
    path = os.path.join(folder, name, run, "run.json")
    if os.path.isfile(path):
        return plotting.read_json(path)
    m = re.fullmatch(r"np(\d+)", name)
    return {"hosts": 1, "per_host": int(m.group(1)), "link": "", "variant": ""} if m else None


def load_runs(folder):
    """Every repeat's summary, with its metrics and layout, as dicts."""
    runs = []
    for name in sorted(os.listdir(folder)):
        if not os.path.isdir(os.path.join(folder, name)):
            continue
        for rep in sorted(os.listdir(os.path.join(folder, name))):
            run = os.path.join(folder, name, rep)
            layout = run_layout(folder, name, rep)
            if layout is None or not os.path.isfile(os.path.join(run, "summary.json")):
                continue
            summary = plotting.read_json(os.path.join(run, "summary.json"))
            summary["metrics"] = plotting.read_jsonl(os.path.join(run, "metrics.jsonl"))
            summary["np"] = summary["world_size"]
            summary.update(layout=f"{layout['hosts']}x{layout['per_host']}", hosts=layout["hosts"],
                           link=layout["link"], variant=layout["variant"])
            summary["run"] = f"{name}/{rep}"  # the repeat's folder: its timeline, metrics and log
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
    variants = sweep.get("variants") or []
    key = lambda r: (r["np"], r["hosts"], link_bits(r["link"]), r["link"],
                     variants.index(r["variant"]) if r["variant"] in variants else -1, r["variant"])
    best = best_by(runs, key)
    rows, base, base_median = [], {}, {}
    for k in sorted(best):
        r = best[k]
        repeats = [x for x in runs if key(x) == k]
        steps = [x["step_ms"] for x in repeats]
        row = {c: r[c] for c in ("layout", "link", "variant", "np", "global_batch", "images_per_sec", "step_ms",
                                 "final_test_acc", "best_test_acc", "run")}
        row.update({c: r[c] for c, _ in PHASES})
        row.update(repeats=len(repeats), step_ms_median=statistics.median(steps), step_ms_min=min(steps),
                   step_ms_max=max(steps), comm_wait_ms_median=statistics.median(x["comm_wait_ms"] for x in repeats))
        per_process = r["images_per_sec"] / r["np"]
        per_process_median = r["global_batch"] / row["step_ms_median"] * 1e3 / r["np"]
        base.setdefault(r["variant"], per_process)
        base_median.setdefault(r["variant"], per_process_median)
        row["efficiency"] = per_process / base[r["variant"]]
        row["efficiency_median"] = per_process_median / base_median[r["variant"]]
        row["time_to_target_s"] = time_to_target(r["metrics"], sweep.get("target"))
        row["oversubscribed"] = r["np"] in sweep.get("oversubscribed", [])
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


def label(row, sweep):
    """How a row is told apart in the figure: layout, link and variant, as far as the sweep has them."""
    parts = [row["layout"] if sweep.get("cluster") else str(row["np"])]
    if row["link"]:
        parts.append(row["link"])
    if row["variant"]:
        parts.append(row["variant"])
    return " ".join(parts)


def markdown(rows, sweep, name):
    target = sweep.get("target")
    cluster, variants, medians = bool(sweep.get("cluster")), bool(sweep.get("variants")), sweep["repeats"] > 1
    head = (["layout", "link"] if cluster else []) + (["variant"] if variants else []) + [
        "np", "global batch", "images/s", "step ms"] + [f"{label} ms" for _, label in PHASES] + ["efficiency"] + (
        ["median step ms (min-max)", "median exposed comm ms", "median efficiency"] if medians else []) + [
        "final acc", "best acc"] + ([f"time to {target:.3f} s"] if target else [])
    lines = [f"Scaling of `{name}` ({sweep['mode']} scaling, {sweep['threads_per_rank']} thread(s) per rank on "
             f"{sweep['cores']} cores; best of {sweep['repeats']} repeat(s); load average before/after "
             f"{sweep['load_average']['before']} / {sweep['load_average']['after']}; {sweep['date']}).",
             f"`{sweep['command']}`", ""]
    if cluster:
        lines[-1:] = ["Layout: hosts x processes a host (tools/cluster.sh; a 1xP layout is one host, plain mpirun); "
                      "link: the rate of each host's link (none: unlimited).", ""]
    if sweep.get("waited_for_idle"):
        busy = sweep.get("runs_started_busy", 0)
        lines[-1:] = [f"Each run started once the cores had been at least 90% idle for 2 s"
                      f"{f' (except {busy}, after 10 minutes of waiting)' if busy else ''}.", ""]
    if sweep.get("oversubscribed"):
        lines[-1:] = [f"np {', '.join(map(str, sweep['oversubscribed']))}: more processes than "
                      f"{sweep['slots']} slot(s), oversubscribed (ranks share cores).", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = ([r["layout"], r["link"] or "-"] if cluster else []) + ([r["variant"]] if variants else []) + [
            f"{r['np']}{' (over)' if r['oversubscribed'] else ''}", str(r["global_batch"]),
            f"{r['images_per_sec']:.0f}", f"{r['step_ms']:.2f}"] + [f"{r[k]:.2f}" for k, _ in PHASES] + [
            f"{r['efficiency']:.3f}"]
        if medians:
            cells += [f"{r['step_ms_median']:.2f} ({r['step_ms_min']:.2f}-{r['step_ms_max']:.2f})",
                      f"{r['comm_wait_ms_median']:.2f}", f"{r['efficiency_median']:.3f}"]
        cells += [f"{r['final_test_acc']:.4f}", f"{r['best_test_acc']:.4f}"]
        if target:
            cells.append(fmt(r["time_to_target_s"], 1) or "not reached")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(rows, sweep, path, name):
    """Throughput and efficiency against np, one line per link and variant (one host: its
    own line), and the step's parts for every row."""
    fig, (thr, eff, parts) = plotting.figure(3)
    series = {}
    for r in rows:
        link = {"": "one host" if sweep.get("cluster") else "", "none": "unlimited"}.get(r["link"], r["link"])
        series.setdefault(" ".join(filter(None, [link, r["variant"]])) or "measured", []).append(r)
    nps = sorted({r["np"] for r in rows})
    base = rows[0]
    ideal = [base["images_per_sec"] * n / base["np"] for n in nps]
    thr.plot(nps, ideal, "k--", label="ideal (linear)")
    eff.axhline(1.0, color="k", linestyle="--", label="ideal")
    for title, mine in series.items():
        thr.plot([r["np"] for r in mine], [r["images_per_sec"] for r in mine], "o-", label=title)
        eff.plot([r["np"] for r in mine], [r["efficiency"] for r in mine], "o-", label=title)
    for n in sorted({r["np"] for r in rows if r["oversubscribed"]}):  # once per np
        top = max(r["efficiency"] for r in rows if r["np"] == n)
        eff.annotate("oversubscribed", (n, top), textcoords="offset points", xytext=(-40, 8), fontsize="x-small")
    bottom = [0.0] * len(rows)
    labels = [label(r, sweep).replace(" ", "\n") for r in rows]
    for key, phase in PHASES:
        values = [r[key] for r in rows]
        parts.bar(range(len(rows)), values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values)]
    many = len(rows) > 8  # layouts x links x variants: labels on their side
    parts.set_xticks(range(len(rows)), [x.replace("\n", " ") for x in labels] if many else labels,
                     fontsize="xx-small" if many else "x-small", rotation=90 if many else 0)
    for ax in (thr, eff):
        ax.set_xscale("log", base=2)
        ax.set_xticks(nps, [str(n) for n in nps])
        ax.set_xlabel("processes")
    thr.set_ylim(bottom=0)
    thr.set_title(f"{name}: images/s")
    eff.set_title("scaling efficiency")
    eff.set_ylim(0, 1.1)
    parts.set_title("step time (ms, mean per step)")
    parts.set_xlabel("layout, link, variant" if sweep.get("cluster") else "processes")
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
    plot(rows, sweep, os.path.join(folder, "scaling.png"), name)
    print(text, end="")
    print(f"wrote {folder}/results.csv, results.md, scaling.png")


if __name__ == "__main__":
    main()
