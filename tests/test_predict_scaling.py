"""tools/predict_scaling against closed forms worked by hand: the alpha-beta costs of ring
and hierarchical all-reduce, the bucket schedule with and without a shared core, the wait
for the slowest rank (against enumerating every draw), alpha and beta recovered from a
made-up bench_allreduce table (and each way across hosts from one run under tools/cluster.sh),
a link's wait that does not take the core from compute, the ResNet layer tables against torchvision's parameter
counts, a hand-made trace read back, and bad arguments (one line, exit code 2)."""
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import tempfile
import unittest
from importlib.machinery import SourceFileLoader

import py_main  # tests/py_main.py: unittest's main, with skips reported to CTest

SOURCE = os.environ.get("DPT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
TOOL = os.path.join(SOURCE, "tools", "predict_scaling")
_loader = SourceFileLoader("predict_scaling", TOOL)
ps = importlib.util.module_from_spec(importlib.util.spec_from_loader("predict_scaling", _loader))
_loader.exec_module(ps)


def net(g=4, intra=(2e-6, 100e9), inter=(10e-6, 10e9)):
    return ps.Network("test", g, intra, inter)


class Costs(unittest.TestCase):
    def test_units(self):
        self.assertEqual(ps.parse_bandwidth("400Gb/s"), 50e9)
        self.assertEqual(ps.parse_bandwidth("450GB/s"), 450e9)
        self.assertAlmostEqual(ps.parse_latency("5us"), 5e-6)
        alpha, bw = ps.parse_link("25Gb/s,20us")
        self.assertAlmostEqual(alpha, 20e-6)
        self.assertEqual(bw, 3.125e9)
        with self.assertRaises(ValueError):
            ps.parse_bandwidth("fast")

    def test_ring(self):
        s = 8e6
        self.assertEqual(ps.ring_allreduce_s(s, 1, net()), 0)
        # 4 GPUs in one node: 2*3 steps of alpha_i, 2*3/4 of the bytes over 100 GB/s.
        self.assertAlmostEqual(ps.ring_allreduce_s(s, 4, net()), 6 * 2e-6 + 1.5 * s / 100e9)
        # 16 GPUs over 4 nodes: paced by the node network.
        self.assertAlmostEqual(ps.ring_allreduce_s(s, 16, net()), 30 * 10e-6 + 30 / 16 * s / 10e9)

    def test_hierarchical(self):
        s = 8e6
        self.assertAlmostEqual(ps.hierarchical_allreduce_s(s, 4, net()), ps.ring_allreduce_s(s, 4, net()))
        # 16 = 4 nodes x 4: in the node 2*3*(alpha_i + s/(4*bw_i)); across 2*3*(alpha_e + s/(4*bw_e)).
        expected = 6 * (2e-6 + s / 4 / 100e9) + 6 * (10e-6 + s / 4 / 10e9)
        self.assertAlmostEqual(ps.hierarchical_allreduce_s(s, 16, net()), expected)
        self.assertLess(ps.hierarchical_allreduce_s(s, 1024, net()), ps.ring_allreduce_s(s, 1024, net()))

    def test_fit_recovers_alpha_beta(self):
        alpha, beta = 3e-6, 1 / 2.5e9
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("# header\n      bytes     count  iters     MPI us     I+W us     dpt us\n")
            for slower in (1.5, 1.0):  # two runs in one file: the faster of each size counts
                for size in (1024, 4096, 65536, 1 << 20, 4 << 20, 64 << 20):
                    t = (2 * alpha + size * beta) * slower  # the ring formula at n = 2
                    f.write(f"{size:>11} {size // 4:>9} 100 {t * 1e6:.4f} {t * 1e6:.4f} {t * 1e6:.6f} 1 1 1 1 1 1\n")
        rows = ps.read_bench_allreduce(f.name)
        os.unlink(f.name)
        self.assertEqual([s for s, _ in rows], [1024, 4096, 65536, 1 << 20, 4 << 20])  # 64 MB left out
        a, b = ps.fit_alpha_beta(rows)
        self.assertAlmostEqual(a / alpha, 1, places=3)
        self.assertAlmostEqual(b / beta, 1, places=4)

    def test_reads_the_shared_column_when_there_is_one(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("      bytes     count  iters     MPI us     I+W us     dpt us     algbw     busbw dpt/MPI"
                    " I+W/MPI  shared us  sh/MPI\n")
            f.write("       1024       256   100        9.0        9.0        8.0     1.0     1.0   1.1   1.0"
                    "        2.0     4.5\n")
            f.write("       4096      1024   100       19.0       19.0       18.0     1.0     1.0   1.1   1.0"
                    "        3.0     6.3\n")
        rows = ps.read_bench_allreduce(f.name)
        os.unlink(f.name)
        self.assertEqual(rows, [(1024, 2.0e-6), (4096, 3.0e-6)])


    def test_hosts_calibration_fits_each_column(self):
        # flat: 100 us + 8 ns/byte (1 Gbit/s); hier: 10 ms + 8 ns/byte; bf16: 10 ms + 4 ns/byte.
        lines = {"flat": (100e-6, 8e-9), "hierarchical": (10e-3, 8e-9), "bf16": (10e-3, 4e-9)}
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("      bytes     count  iters     MPI us     I+W us     dpt us     algbw     busbw dpt/MPI"
                    " I+W/MPI  shared us  sh/MPI    flat us    hier us    bf16 us\n")
            for size in (1024, 65536, 1 << 20, 4 << 20):
                t = {k: (a + b * size) * 1e6 for k, (a, b) in lines.items()}
                f.write(f"{size} {size // 4} 3 1 1 1 1 1 1 1 1 1 {t['flat']:.4f} {t['hierarchical']:.4f} "
                        f"{t['bf16']:.4f}\n")
        cal = ps.HostsCalibration(f"2x1-1gbit={f.name}", 4 << 20)
        os.unlink(f.name)
        self.assertEqual(cal.key(), (2, 1, "1gbit"))
        for name, (a, b) in lines.items():
            self.assertAlmostEqual(cal.seconds(name, 1 << 20) / (a + b * (1 << 20)), 1, places=5)
        with self.assertRaises(ValueError):
            ps.HostsCalibration("2x-1gbit=x.txt", 4 << 20)


class Schedule(unittest.TestCase):
    def test_buckets_follow_ddp(self):
        mb = 1 << 20
        grads = [(1, mb // 2), (2, mb // 2), (3, 10 * mb), (4, 20 * mb), (5, 4)]
        # First bucket closes at 1 MB, the next at 25 MB, the rest is the last.
        self.assertEqual(ps.ddp_buckets(grads), [(2, mb), (4, 30 * mb), (5, 4)])
        self.assertEqual(ps.ddp_buckets(grads, cap_mb=0), grads)

    def test_overlap_on_a_spare_channel(self):
        prof = ps.Profile("p", forward_ms=3, backward_ms=10, other_ms=1, buckets=[(2, 100), (10, 100)])
        r = ps.simulate(prof, lambda nbytes: 3e-3)  # every bucket 3 ms
        # Bucket 0 runs 2..5 behind backward; bucket 1 runs 10..13, all exposed.
        self.assertEqual([(b["start_ms"], b["end_ms"]) for b in r["buckets"]], [(2, 5), (10, 13)])
        self.assertEqual(r["exposed_ms"], 3)
        self.assertEqual(r["step_ms"], 3 + 1 + 10 + 3)
        self.assertEqual([b["hidden"] for b in r["buckets"]], [1, 0])

    def test_queued_buckets_wait_for_the_one_before(self):
        prof = ps.Profile("p", 0, 10, 0, [(1, 1), (2, 1)])
        r = ps.simulate(prof, lambda nbytes: 4e-3)
        self.assertEqual([(b["start_ms"], b["end_ms"]) for b in r["buckets"]], [(1, 5), (5, 9)])
        self.assertEqual(r["exposed_ms"], 0)

    def test_shared_core(self):
        # Backward 10 ms of work; a 2 ms all-reduce from 4 ms: both at half speed until it is done
        # at 8 ms (compute has done 6), then compute alone to 12 ms. Nothing hidden for free.
        prof = ps.Profile("p", 0, 10, 0, [(4, 1)])
        r = ps.simulate(prof, lambda nbytes: 2e-3, shared_core=True)
        (b,) = r["buckets"]
        self.assertAlmostEqual(b["start_ms"], 4)
        self.assertAlmostEqual(b["end_ms"], 8)
        self.assertAlmostEqual(r["backward_ms"], 12)
        self.assertAlmostEqual(r["step_ms"], 12)
        # A bucket ready at the end runs alone after backward.
        r = ps.simulate(ps.Profile("p", 0, 10, 0, [(10, 1)]), lambda nbytes: 2e-3, shared_core=True)
        self.assertAlmostEqual(r["step_ms"], 12)
        self.assertAlmostEqual(r["exposed_ms"], 2)

    def test_a_links_wait_does_not_take_the_core(self):
        # Backward 10 ms of work; from 4 ms a bucket of 2 ms CPU work then 4 ms on the link:
        # both at half speed to 8 ms (compute has done 6), compute alone while the link
        # carries it (to 12 ms: done 10, and the bucket too). The link's time is hidden.
        prof = ps.Profile("p", 0, 10, 0, [(4, 1)])
        r = ps.simulate(prof, lambda nbytes: (2e-3, 4e-3), shared_core=True)
        (b,) = r["buckets"]
        self.assertAlmostEqual(b["end_ms"], 12)
        self.assertAlmostEqual(r["backward_ms"], 12)
        self.assertAlmostEqual(r["exposed_ms"], 0)
        # Ready at the end: 2 + 4 ms after backward, all exposed.
        r = ps.simulate(ps.Profile("p", 0, 10, 0, [(10, 1)]), lambda nbytes: (2e-3, 4e-3), shared_core=True)
        self.assertAlmostEqual(r["exposed_ms"], 6)
        self.assertAlmostEqual(r["step_ms"], 16)

    def test_slowest_rank(self):
        samples = [10.0, 11.0, 15.0]
        for n in (2, 3):
            draws = [max(d) for d in itertools.product(samples, repeat=n)]
            expected = sum(draws) / len(draws) - 11.0  # against the median
            self.assertAlmostEqual(ps.straggler_ms(samples, n), expected)
        self.assertEqual(ps.straggler_ms(samples, 1), 0)
        self.assertEqual(ps.straggler_ms([], 64), 0)

    def test_efficiency_and_more_gpus(self):
        prof = ps.profile_from_model("resnet50", 100.0)
        rows = ps.predictions(prof, ps.preset("eth25"), [1, 8, 64, 512], "ring")
        self.assertEqual(rows[0]["efficiency"], 1.0)
        self.assertEqual([r["nodes"] for r in rows], [1, 1, 8, 64])
        effs = [r["efficiency"] for r in rows]
        self.assertEqual(effs, sorted(effs, reverse=True))


class Models(unittest.TestCase):
    def test_parameter_counts_match_torchvision(self):
        # torchvision.models.resnet50/101/152: 25,557,032 / 44,549,160 / 60,192,808 parameters,
        # about 4.1 / 7.8 / 11.5 G multiply-adds at 224x224.
        for name, params, gmacs in (("resnet50", 25557032, 4.1), ("resnet101", 44549160, 7.8),
                                    ("resnet152", 60192808, 11.5)):
            layers = ps.resnet_layers(ps.MODELS[name])
            self.assertEqual(sum(sum(p) for _, p, _ in layers), params, name)
            self.assertAlmostEqual(sum(m for _, _, m in layers) / 1e9, gmacs, delta=0.05 * gmacs)

    def test_model_profile(self):
        prof = ps.profile_from_model("resnet50", 90.0, grad_bytes=2)
        self.assertAlmostEqual(prof.forward_ms, 30)
        self.assertAlmostEqual(prof.backward_ms, 60)
        self.assertEqual(sum(b for _, b in prof.buckets), 2 * 25557032)
        self.assertAlmostEqual(prof.buckets[-1][0], 60)  # conv1's gradient comes last


class TimelineInput(unittest.TestCase):
    def test_reads_the_median_step(self):
        def x(name, ts, dur, tid=0, **args):
            return {"ph": "X", "name": name, "pid": 0, "tid": tid, "ts": ts, "dur": dur, "args": args}

        events = [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "compute"}}]
        for i, bwd in enumerate((5000, 8000, 6000)):  # three steps; the median has 6 ms backward
            t = i * 100000
            events += [x("data wait", t, 100), x("forward", t + 100, 2000),
                       x("backward", t + 2100, bwd), x("accumulate_grad", t + 2100, 10, numel=300000),
                       x("accumulate_grad", t + 2100 + bwd - 10, 10, numel=1000),
                       x("optimizer", t + 2100 + bwd, 400)]
        with tempfile.TemporaryDirectory() as d:
            trace = os.path.join(d, "timeline.json")
            with open(trace, "w") as f:
                json.dump({"traceEvents": events}, f)
            prof = ps.profile_from_timeline(trace)
            self.assertEqual((prof.forward_ms, prof.backward_ms, prof.other_ms), (2.0, 6.0, 0.5))
            # 1.2 MB closes the first bucket at 10 us; 4 kB is ready at the end.
            self.assertEqual(prof.buckets, [(0.01, 1200000), (6.0, 4000)])
            self.assertEqual(prof.step_samples, [7.5, 8.5, 10.5])
            # The run's summary beside it: the means of all its steps (here a 12 ms backward,
            # 17 ms in all, twice the median recorded step) stretch the profile.
            with open(os.path.join(d, "summary.json"), "w") as f:
                json.dump({"data_ms": 0.25, "forward_ms": 4.0, "backward_ms": 12.0, "optimizer_ms": 0.75}, f)
            prof = ps.profile_from_timeline(trace)
            self.assertEqual((prof.forward_ms, prof.backward_ms, prof.other_ms), (4.0, 12.0, 1.0))
            self.assertEqual(prof.buckets, [(0.02, 1200000), (12.0, 4000)])
            self.assertEqual(prof.step_samples, [15.0, 17.0, 21.0])


class BadArguments(unittest.TestCase):
    def run_tool(self, *args):
        return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)

    def test_one_line_and_exit_code_2(self):
        for args, needle in ((["--model", "resnet50", "--inter", "fast,5us"], "fast"),
                             (["--model", "resnet50", "--network", "this-machine"], "--calibrate"),
                             (["--model", "resnet50", "--network", "this-machine", "--calibrate", "/no/file"],
                              "/no/file"),
                             (["--timeline", "/no/trace.json"], "/no/trace.json"),
                             (["--model", "resnet50", "--calibrate-hosts", "2x1=ar.txt"], "LAYOUT-LINK=FILE")):
            r = self.run_tool(*args)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(needle, r.stderr)
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)


if __name__ == "__main__":
    py_main.main()
