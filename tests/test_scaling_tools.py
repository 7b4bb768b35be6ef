"""tools/scaling.sh, scaling_report.py, plot_run.py and plot_timeline.py end to end: a tiny
weak and strong sweep (np 1 and 2, a few steps of an MLP on synthetic data) writes the CSV,
markdown and PNG, with each run's batch, images/s and efficiency recomputed here from the
runs' own summary.json; a sweep across simulated hosts (--cluster 1x2,2x1 at two link
rates, through tools/cluster.sh; skipped where namespaces cannot be made) likewise, each
2x1 run's world table naming two hosts; the report's arithmetic on made-up runs
(efficiency, time to a target accuracy, medians of repeats, one baseline per variant)
against values worked by hand; bad arguments end with one line and exit 2."""
import csv
import json
import os
import subprocess
import tempfile
import unittest

import py_main  # tests/py_main.py: unittest's main, with skips reported to CTest

SOURCE = os.environ.get("DPT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
TOOLS = os.path.join(SOURCE, "tools")
PY = "/usr/bin/python3"
PNG = b"\x89PNG\r\n\x1a\n"


def run(*cmd):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=120)


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == PNG


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def tiny_config(directory):
    path = os.path.join(directory, "tiny.yaml")
    with open(path, "w") as f:
        f.write("model: {name: mlp, hidden: [64]}\n"
                "dataset: {name: synthetic, shape: [1, 8, 8], classes: 4, size: 2048}\n"
                "epochs: 1\nbatch_size: 32\noptimizer: {name: sgd, lr: 0.1}\n")
    return path


class Sweep(unittest.TestCase):
    def sweep(self, d, mode):
        out = os.path.join(d, mode)
        r = run(os.path.join(TOOLS, "scaling.sh"), tiny_config(d), "--np", "1,2", "--steps", "8", f"--{mode}",
                "--out", out)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return out

    def check(self, out, batches):
        rows = read_csv(os.path.join(out, "results.csv"))
        self.assertEqual([int(r["np"]) for r in rows], [1, 2])
        base = None
        for row, (n, per_rank) in zip(rows, batches):
            (summary_path,) = [os.path.join(out, f"np{n}", "r1", "summary.json")]
            with open(summary_path) as f:
                summary = json.load(f)
            self.assertEqual(int(row["global_batch"]), n * per_rank)
            self.assertEqual(summary["global_batch"], n * per_rank)
            ips = summary["global_batch"] / summary["step_ms"] * 1e3
            self.assertAlmostEqual(float(row["images_per_sec"]), ips, delta=1e-3 * ips)
            base = base or ips
            self.assertAlmostEqual(float(row["efficiency"]), ips / n / base, places=3)
            for key in ("forward_ms", "backward_ms", "comm_wait_ms", "optimizer_ms", "final_test_acc"):
                self.assertIn(key, row)
            with open(os.path.join(out, f"np{n}", "r1", "timeline.json")) as f:
                self.assertIn("traceEvents", json.load(f))
        with open(os.path.join(out, "results.md")) as f:
            md = f.read()
        self.assertIn("| np | global batch | images/s |", md)
        self.assertEqual(md.count("\n| 1 |") + md.count("\n| 2 |"), 2)
        self.assertTrue(is_png(os.path.join(out, "scaling.png")))

    def test_weak_and_strong(self):
        with tempfile.TemporaryDirectory() as d:
            self.check(self.sweep(d, "weak"), [(1, 32), (2, 32)])
            self.check(self.sweep(d, "strong"), [(1, 32), (2, 16)])
            # The other plots, on what the sweep wrote.
            r = run(PY, os.path.join(TOOLS, "plot_run.py"), os.path.join(d, "weak", "np2", "r1"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(is_png(os.path.join(d, "weak", "np2", "r1", "curves.png")))
            png = os.path.join(d, "tl.png")
            r = run(PY, os.path.join(TOOLS, "plot_timeline.py"), os.path.join(d, "weak", "np2", "r1", "timeline.json"),
                    "-o", png)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(is_png(png))


class ClusterSweep(unittest.TestCase):
    def test_layouts_and_links(self):
        check = run(os.path.join(TOOLS, "cluster.sh"), "--check")
        if check.returncode != 0:
            self.skipTest(check.stderr.strip() or f"tools/cluster.sh --check exited with {check.returncode}")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "cluster")
            r = run(os.path.join(TOOLS, "scaling.sh"), tiny_config(d), "--cluster", "1x2,2x1", "--link", "1gbit,none",
                    "--steps", "3", "--out", out)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            rows = read_csv(os.path.join(out, "results.csv"))
            # One host first, then the unlimited link, then 1 Gbit/s; the 1x2 run is the baseline.
            self.assertEqual([(row["layout"], row["link"]) for row in rows],
                             [("1x2", ""), ("2x1", "none"), ("2x1", "1gbit")])
            base = None
            for row, folder in zip(rows, ["1x2", "2x1-none", "2x1-1gbit"]):
                self.assertEqual(row["run"], f"{folder}/r1")
                with open(os.path.join(out, folder, "r1", "summary.json")) as f:
                    summary = json.load(f)
                self.assertEqual((summary["world_size"], summary["global_batch"]), (2, 64))
                ips = summary["global_batch"] / summary["step_ms"] * 1e3
                self.assertAlmostEqual(float(row["images_per_sec"]), ips, delta=1e-3 * ips)
                base = base or ips
                self.assertAlmostEqual(float(row["efficiency"]), ips / base, places=3)
                with open(os.path.join(out, folder, "r1.log")) as f:
                    log = f.read()
                self.assertIn("world: 2 ranks on 2 hosts" if folder != "1x2" else "world: 2 ranks on 1 host", log)
            with open(os.path.join(out, "results.md")) as f:
                md = f.read()
            self.assertIn("| layout | link | np |", md)
            self.assertIn("\n| 2x1 | 1gbit | 2 |", md)
            self.assertIn("\n| 1x2 | - | 2 |", md)
            self.assertTrue(is_png(os.path.join(out, "scaling.png")))


class Report(unittest.TestCase):
    def test_efficiency_and_time_to_target(self):
        with tempfile.TemporaryDirectory() as d:
            # np 1: 100 ms steps of 64 images (640/s); np 2: 125 ms of 128 (1024/s, efficiency 0.8);
            # np 4 oversubscribed: 400 ms of 256 (640/s, 0.25). Accuracy 0.9 reached at 30 s, 20 s, never.
            runs = {1: (100.0, [(15.0, 0.85), (30.0, 0.90)]), 2: (125.0, [(20.0, 0.91), (40.0, 0.92)]),
                    4: (400.0, [(40.0, 0.5), (80.0, 0.6)])}
            for n, (step, epochs) in runs.items():
                accs = [acc for _, acc in epochs]
                folder = os.path.join(d, f"np{n}", "r1")
                os.makedirs(folder)
                phases = {"data_ms": 1.0, "forward_ms": 30.0, "backward_ms": step - 41.0, "comm_wait_ms": 5.0,
                          "optimizer_ms": 5.0, "step_ms": step}
                with open(os.path.join(folder, "summary.json"), "w") as f:
                    json.dump(dict(world_size=n, global_batch=64 * n, final_test_acc=accs[-1],
                                   best_test_acc=max(accs), **phases), f)
                with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
                    for e, (elapsed, acc) in enumerate(epochs):
                        f.write(json.dumps(dict(epoch=e + 1, test_acc=acc, elapsed_s=elapsed)) + "\n")
            with open(os.path.join(d, "sweep.json"), "w") as f:
                json.dump(dict(command="tools/scaling.sh x.yaml", mode="weak", threads_per_rank=1, cores=2, slots=2,
                               repeats=1, target=0.9, oversubscribed=[4], date="today", waited_for_idle=True,
                               runs_started_busy=1,
                               load_average={"before": "0.1", "after": "0.2"}), f)
            r = run(PY, os.path.join(TOOLS, "scaling_report.py"), d)
            self.assertEqual(r.returncode, 0, r.stderr)
            rows = read_csv(os.path.join(d, "results.csv"))
            self.assertEqual([float(r["images_per_sec"]) for r in rows], [640, 1024, 640])
            self.assertEqual([float(r["efficiency"]) for r in rows], [1.0, 0.8, 0.25])
            self.assertEqual([r["time_to_target_s"] for r in rows], ["30.0000", "20.0000", ""])
            self.assertEqual([r["oversubscribed"] for r in rows], ["no", "no", "yes"])
            self.assertEqual([r["run"] for r in rows], ["np1/r1", "np2/r1", "np4/r1"])
            with open(os.path.join(d, "results.md")) as f:
                md = f.read()
            self.assertIn("| 4 (over) |", md)
            self.assertIn("not reached", md)
            self.assertIn("np 4: more processes than 2 slot(s)", md)
            self.assertIn("90% idle for 2 s (except 1, after 10 minutes of waiting)", md)

    def test_variants_and_repeats(self):
        with tempfile.TemporaryDirectory() as d:
            # Variants a and b, each at 1x1 and 2x1 at 1gbit, three repeats of 64 images a rank.
            # a: 1x1 steps 100, 80, 120 ms, 2x1 200, 125, 160. Best: 1x1 800 images/s a process, 2x1
            # 1024 / 2 = 512, efficiency 0.64; medians 100 and 160 ms: 640 and 800 / 2 = 400, 0.625.
            # b: 1x1 50 ms, 2x1 100 ms, every time: 0.5 both ways, against b's own 1x1 (not a's).
            steps = {("1x1", "a"): [100, 80, 120], ("2x1-1gbit", "a"): [200, 125, 160],
                     ("1x1", "b"): [50, 50, 50], ("2x1-1gbit", "b"): [100, 100, 100]}
            for (folder, variant), times in steps.items():
                hosts = int(folder[0])
                for k, step in enumerate(times, start=1):
                    run_dir = os.path.join(d, f"{folder}-{variant}", f"r{k}")
                    os.makedirs(run_dir)
                    with open(os.path.join(run_dir, "summary.json"), "w") as f:
                        json.dump(dict(world_size=hosts, global_batch=64 * hosts, final_test_acc=0.5, best_test_acc=0.5,
                                       step_ms=step, data_ms=0.0, forward_ms=step / 2, backward_ms=step / 2,
                                       comm_wait_ms=float(k), optimizer_ms=0.0), f)
                    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
                        f.write(json.dumps(dict(epoch=1, test_acc=0.5, elapsed_s=1.0)) + "\n")
                    with open(os.path.join(run_dir, "run.json"), "w") as f:
                        json.dump(dict(hosts=hosts, per_host=1, link="1gbit" if hosts > 1 else "", variant=variant), f)
            with open(os.path.join(d, "sweep.json"), "w") as f:
                json.dump(dict(command="tools/scaling.sh x.yaml --cluster 1x1,2x1", mode="weak", threads_per_rank=1,
                               cores=2, slots=2, repeats=3, target=None, oversubscribed=[], date="today",
                               variants=["b", "a"], cluster=["1x1", "2x1"], links=["1gbit"],
                               load_average={"before": "0.1", "after": "0.2"}), f)
            r = run(PY, os.path.join(TOOLS, "scaling_report.py"), d)
            self.assertEqual(r.returncode, 0, r.stderr)
            rows = read_csv(os.path.join(d, "results.csv"))
            self.assertEqual([(row["layout"], row["link"], row["variant"]) for row in rows],
                             [("1x1", "", "b"), ("1x1", "", "a"), ("2x1", "1gbit", "b"), ("2x1", "1gbit", "a")])
            self.assertEqual([float(row["step_ms"]) for row in rows], [50, 80, 100, 125])
            self.assertEqual([float(row["step_ms_median"]) for row in rows], [50, 100, 100, 160])
            self.assertEqual([(float(row["step_ms_min"]), float(row["step_ms_max"])) for row in rows],
                             [(50, 50), (80, 120), (100, 100), (125, 200)])
            self.assertEqual([float(row["comm_wait_ms_median"]) for row in rows], [2, 2, 2, 2])
            self.assertEqual([float(row["efficiency"]) for row in rows], [1.0, 1.0, 0.5, 0.64])
            self.assertEqual([float(row["efficiency_median"]) for row in rows], [1.0, 1.0, 0.5, 0.625])
            with open(os.path.join(d, "results.md")) as f:
                md = f.read()
            self.assertIn("| layout | link | variant | np |", md)
            self.assertIn("\n| 2x1 | 1gbit | a | 2 | 128 | 1024 | 125.00 |", md)
            self.assertIn("| 160.00 (125.00-200.00) | 2.00 | 0.625 |", md)


class BadArguments(unittest.TestCase):
    def expect_error(self, cmd, needle):
        r = run(*cmd)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(needle, r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)

    def test_one_line_and_exit_code_2(self):
        sh = os.path.join(TOOLS, "scaling.sh")
        with tempfile.TemporaryDirectory() as d:
            config = tiny_config(d)
            self.expect_error([sh, os.path.join(d, "missing.yaml")], "missing.yaml")
            self.expect_error([sh, config, "--np", "1,two"], "--np")
            self.expect_error([sh, config, "--steps", "5", "--epochs", "1"], "not both")
            self.expect_error([sh, config, "--np", "3", "--strong", "--np", "2,3", "--out", d], "does not divide")
            self.expect_error([sh, config, "--np", "2", "--cluster", "2x1"], "not both")
            self.expect_error([sh, config, "--cluster", "2x"], "HOSTSxPROCESSES")
            self.expect_error([sh, config, "--cluster", "2x1,0x2"], "HOSTSxPROCESSES")
            self.expect_error([sh, config, "--cluster", "2x1", "--link", "1gbit,1gb"], "'1gb'")
            self.expect_error([sh, config, "--np", "2", "--link", "1gbit"], "--link needs --cluster")
            self.expect_error([sh, config, "--variant", "flat"], "--variant")
            self.expect_error([sh, config, "--variant", "a x=1", "--variant", "a y=2"], "two variants named 'a'")
            self.expect_error([PY, os.path.join(TOOLS, "scaling_report.py"), d], "sweep.json")
            self.expect_error([PY, os.path.join(TOOLS, "plot_run.py"), d], "metrics.jsonl")
            self.expect_error([PY, os.path.join(TOOLS, "plot_timeline.py"), os.path.join(d, "no.json")], "no.json")


if __name__ == "__main__":
    py_main.main()
