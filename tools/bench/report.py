"""Tables for the benchmark scripts: reads the JSON lines the runs printed on stdin and
keeps the best run of each kind.
    report.py vs_torch   (bench_train / torch_train.py lines)
    report.py scaling    (bench_ddp / torch_ddp.py lines)
    report.py variants   (any lines with framework and images_per_sec: one row per framework)
    report.py all_reduce (bench_ddp lines of several all-reduce configurations: median and
                          spread of each, not the best, and each against the first)
    report.py builds     (vs_build.sh: bench_train lines tagged "build": "before"/"after" and
                          torch_train.py lines, one of each per round: medians and ranges of
                          each build's images/s, its ratio to PyTorch and after/before)"""
import json
import statistics
import sys


def best_by(runs, key):
    best = {}
    for r in runs:
        k = key(r)
        if k not in best or r["images_per_sec"] > best[k]["images_per_sec"]:
            best[k] = r
    return best


def vs_torch(runs):
    best = best_by(runs, lambda r: r["framework"] == "dpt")
    dpt, pt = best[True], best[False]
    print(f"{dpt['model']}, batch {dpt['batch']}, {dpt['threads']} threads, best of {len(runs) // 2} runs each")
    print(f"{'framework':<22}{'ms/step':>10}{'images/s':>12}{'peak RSS MB':>14}")
    for r in (dpt, pt):
        print(f"{r['framework']:<22}{r['ms_per_step']:>10.2f}{r['images_per_sec']:>12.1f}{r['peak_rss_mb']:>14.1f}")
    print(f"ratio dpt/pytorch: {dpt['images_per_sec'] / pt['images_per_sec']:.2f}x")


def scaling(runs):
    best = best_by(runs, lambda r: (r["framework"], r["np"]))
    frameworks = sorted({f for f, _ in best}, key=lambda f: (not f.startswith("dpt"), f))
    m = runs[0]
    print(f"{m['model']}, batch {m['batch_per_rank']} per rank, {m['threads']} thread(s) per rank, "
          f"best of {len(runs) // len(best)} runs each")
    print(f"{'framework':<34}{'np=1 img/s':>12}{'np=2 img/s':>12}{'efficiency':>12}")
    for f in frameworks:
        if (f, 1) not in best or (f, 2) not in best:
            continue
        one, two = best[(f, 1)]["images_per_sec"], best[(f, 2)]["images_per_sec"]
        print(f"{f:<34}{one:>12.1f}{two:>12.1f}{two / (2 * one):>12.3f}")


def variants(runs):
    best = best_by(runs, lambda r: r["framework"])
    print(f"best of {len(runs) // len(best)} runs each")
    print(f"{'variant':<34}{'images/s':>12}")
    for f, r in best.items():
        print(f"{f:<34}{r['images_per_sec']:>12.1f}")


def all_reduce(runs):
    names = list(dict.fromkeys(r["all_reduce"] for r in runs))  # in the order they ran
    m = runs[0]
    print(f"{m['model']}, {m['np']} ranks on {m['hosts']} hosts, batch {m['batch_per_rank']} per rank, "
          f"{len(runs) // len(names)} alternating runs each: median (min-max)")
    columns = [("ms_per_step", "ms/step", 1), ("exposed_comm_ms", "exposed comm ms", 1),
               ("link_bytes_per_step", "link MB/step", 1e-6)]
    print(f"| all-reduce (hierarchical/compress) | " + " | ".join(c[1] for c in columns) +
          " | link bytes vs first | exposed comm vs first |")
    print("|---" * (len(columns) + 3) + "|")
    medians = {}
    for name in names:
        mine = [r for r in runs if r["all_reduce"] == name]
        cells = []
        for key, _, scale in columns:
            values = [r[key] * scale for r in mine if key in r]
            if not values:
                cells.append("-")
                continue
            medians[(name, key)] = statistics.median(values)
            cells.append(f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")
        ratio = lambda key: (f"{medians[(name, key)] / medians[(names[0], key)]:.2f}x"
                             if (name, key) in medians and medians.get((names[0], key)) else "-")
        print(f"| {name} | " + " | ".join(cells) + f" | {ratio('link_bytes_per_step')} | "
              f"{ratio('exposed_comm_ms')} |")


def builds(runs):
    rounds = {}
    for r in runs:
        rounds.setdefault(r.get("build", "torch"), []).append(r["images_per_sec"])
    torch = rounds["torch"]

    def spread(values, fmt):
        return f"median {fmt(statistics.median(values))} (range {fmt(min(values))}-{fmt(max(values))})"

    r0 = runs[0]
    print(f"{r0['model']}, batch {r0['batch']}, {r0['threads']} threads, {len(torch)} alternating rounds")
    for build in ("before", "after"):
        vs_torch = [a / t for a, t in zip(rounds[build], torch)]
        print(f"{build:<7} images/s {spread(rounds[build], lambda v: f'{v:.1f}')}, "
              f"vs PyTorch {spread(vs_torch, lambda v: f'{v:.2f}x')}")
    after_before = [a / b for a, b in zip(rounds["after"], rounds["before"])]
    print(f"after/before, round by round: {spread(after_before, lambda v: f'{v:.3f}')}; "
          f"PyTorch images/s {spread(torch, lambda v: f'{v:.1f}')}")


if __name__ == "__main__":
    lines = [json.loads(line) for line in sys.stdin if line.strip().startswith("{")]
    {"vs_torch": vs_torch, "scaling": scaling, "variants": variants, "all_reduce": all_reduce,
     "builds": builds}[sys.argv[1]](lines)
