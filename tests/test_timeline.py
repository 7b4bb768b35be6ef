"""train's step timing and --timeline, end to end: a short 2-process run of mnist_cnn on
synthetic data writes a Chrome trace that a JSON parser reads, with one row per rank, the
backward pass per autograd node, and each DDP bucket's all-reduce; at least one bucket's
all-reduce is launched while backward still has nodes to run (the overlap DDP is built
for), and the buckets hold exactly mnist_cnn's 421,642 parameters — the buckets that
tools/predict_scaling derives from a 1-process trace. Each step's collectives and bytes
(timeline counters, summary.json) are its buckets and the stop vote. The phases in
metrics.jsonl agree with the epoch's own clock. Run by CTest with DPT_BUILD_DIR and DPT_SOURCE_DIR set."""
import json
import os
import subprocess
import sys
import tempfile
import importlib.util
import unittest
from importlib.machinery import SourceFileLoader

import py_main  # tests/py_main.py: unittest's main, with skips reported to CTest

BUILD = os.environ.get("DPT_BUILD_DIR", "build")
SOURCE = os.environ.get("DPT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
TRAIN = os.path.join(BUILD, "train")
MNIST_CNN_PARAMS = 421642  # He et al.-style count, checked by test_resnet/test_models too
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
PHASES = ["data_ms", "forward_ms", "backward_ms", "comm_wait_ms", "optimizer_ms"]


def config(directory, extra=""):
    path = os.path.join(directory, "c.yaml")
    with open(path, "w") as f:
        f.write("model: {name: mnist_cnn}\n"
                "dataset: {name: synthetic, shape: [1, 28, 28], classes: 10, size: 1536}\n"
                "epochs: 1\nbatch_size: 32\nthreads: 1\n"
                "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
                f"output: {{dir: {directory}/run}}\n" + extra)
    return path


def run(args, np=None):
    cmd = ([*"mpirun --oversubscribe --bind-to none -np".split(), str(np)] if np else []) + [TRAIN, *args]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=120)


def assert_phases_match_the_clock(test, m, images_per_step):
    """images/s comes from the epoch's own clock, step_ms from the phases' laps inside it,
    which leave out only the epoch's start and end (and, averaged over ranks, may exceed rank
    0's clock by a start-up skew); when idle they agree within 1%. The bounds are generous so
    that a rank descheduled outside the laps on a busy machine does not fail them; the
    mistakes they are for are factors: a per-rank batch for the global one (2x at np 2), or
    the timeline's 6 steps for the epoch's 24 (4x)."""
    clock_ms = images_per_step / m["images_per_sec"] * 1e3
    test.assertGreater(m["step_ms"], 0.75 * clock_ms, m)
    test.assertLess(m["step_ms"], 1.25 * clock_ms, m)


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_tool(name):
    loader = SourceFileLoader(name, os.path.join(SOURCE, "tools", name))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


TWO = {}  # the 2-process run, made once


def setUpModule():
    TWO["tmp"] = tempfile.TemporaryDirectory()
    d = TWO["tmp"].name
    TWO["trace"] = os.path.join(d, "trace", "t.json")  # its folder is made
    TWO["result"] = run([config(d), "--timeline", TWO["trace"], "--timeline-steps", "6"], np=2)
    TWO["metrics"] = os.path.join(d, "run", "metrics.jsonl")


def tearDownModule():
    TWO["tmp"].cleanup()


def two_process_events():
    if TWO["result"].returncode != 0:
        raise AssertionError(TWO["result"].stderr)
    with open(TWO["trace"]) as f:
        return json.load(f)["traceEvents"]


class Timeline(unittest.TestCase):
    def setUp(self):
        self.events = two_process_events()
        self.spans = [e for e in self.events if e["ph"] == "X"]

    def rows(self, pid):
        return {e["tid"]: e["args"]["name"] for e in self.events
                if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid}

    def test_one_row_per_rank_and_per_track(self):
        names = {e["pid"]: e["args"]["name"] for e in self.events if e["name"] == "process_name"}
        self.assertEqual(names, {0: "rank 0", 1: "rank 1"})
        for pid in (0, 1):
            rows = self.rows(pid)
            self.assertEqual(rows[0], "compute")
            self.assertIn("allreduce bucket 0", rows.values())
            for e in self.spans:
                if e["pid"] == pid:
                    self.assertIn(e["tid"], rows)
                    self.assertGreaterEqual(e["dur"], 0)

    def test_records_the_asked_steps_with_per_node_backward(self):
        for pid in (0, 1):
            compute = [e for e in self.spans if e["pid"] == pid and e["tid"] == 0]
            for phase in ("data wait", "forward", "backward", "allreduce wait", "optimizer"):
                self.assertEqual(sum(e["name"] == phase for e in compute), 6, phase)
            names = {e["name"] for e in compute}
            self.assertTrue({"conv2d", "linear", "accumulate_grad", "cross_entropy"} <= names, names)
            # Each step's gradients: every parameter once.
            grads = [e["args"]["numel"] for e in compute if e["name"] == "accumulate_grad"]
            self.assertEqual(sum(grads), 6 * MNIST_CNN_PARAMS)

    def test_buckets_hold_every_parameter(self):
        for pid in (0, 1):
            reduces = [e for e in self.spans if e["pid"] == pid and e["name"] == "allreduce"]
            per_step = len(reduces) // 6
            self.assertGreaterEqual(per_step, 2)  # the first bucket is ~1 MB of 1.7 MB
            self.assertEqual(sum(e["args"]["bytes"] for e in reduces[:per_step]), 4 * MNIST_CNN_PARAMS)

    def test_an_allreduce_overlaps_backward(self):
        overlapped = 0
        for pid in (0, 1):
            compute = [e for e in self.spans if e["pid"] == pid and e["tid"] == 0]
            backwards = [e for e in compute if e["name"] == "backward"]
            nodes = [e for e in compute if e["name"] not in
                     ("data wait", "forward", "backward", "allreduce wait", "optimizer")]
            for r in (e for e in self.spans if e["pid"] == pid and e["name"] == "allreduce"):
                launch = r["ts"]
                for b in backwards:
                    end = b["ts"] + b["dur"]
                    # Launched inside backward, and backward nodes ran after the launch.
                    if b["ts"] <= launch < end and any(launch <= n["ts"] < end for n in nodes):
                        overlapped += 1
        self.assertGreater(overlapped, 0)

    def test_collectives_per_step_are_the_buckets_and_the_stop_vote(self):
        """mnist_cnn has no buffers: a step is its bucket all-reduces (as the trace shows
        them) and the stop vote (one i64), the bytes every gradient and that i64. The
        timeline's counter holds each recorded step's count; summary.json the mean."""
        expected_bytes = 4 * MNIST_CNN_PARAMS + 8
        for pid in (0, 1):
            buckets = len([e for e in self.spans if e["pid"] == pid and e["name"] == "allreduce"]) // 6
            counts = [e["args"]["collectives"] for e in self.events
                      if e["ph"] == "C" and e["pid"] == pid and e["name"] == "collectives per step"]
            sizes = [e["args"]["bytes"] for e in self.events
                     if e["ph"] == "C" and e["pid"] == pid and e["name"] == "bytes per step"]
            self.assertEqual(counts, [buckets + 1] * 6)
            self.assertEqual(sizes, [expected_bytes] * 6)
        with open(os.path.join(os.path.dirname(TWO["metrics"]), "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(summary["collectives_per_step"], buckets + 1)
        self.assertEqual(summary["bytes_per_step"], expected_bytes)

    def test_phases_add_up_to_the_epoch_clock(self):
        (m,) = read_lines(TWO["metrics"])
        for key in PHASES:
            self.assertGreaterEqual(m[key], 0, key)
        self.assertAlmostEqual(sum(m[k] for k in PHASES), m["step_ms"], delta=1e-3 * m["step_ms"])
        assert_phases_match_the_clock(self, m, 64)  # 64 images a step at np 2


class OneRank(unittest.TestCase):
    def test_no_communication_and_summary_phases(self):
        with tempfile.TemporaryDirectory() as d:
            trace = os.path.join(d, "t.json")
            r = run([config(d), "--timeline", trace])
            self.assertEqual(r.returncode, 0, r.stderr)
            (m,) = read_lines(os.path.join(d, "run", "metrics.jsonl"))
            self.assertEqual(m["comm_wait_ms"], 0)
            assert_phases_match_the_clock(self, m, 32)
            with open(os.path.join(d, "run", "summary.json")) as f:
                summary = json.load(f)
            self.assertEqual(summary["global_batch"], 32)
            for key in PHASES + ["step_ms"]:
                self.assertGreater(summary[key] + (key == "comm_wait_ms"), 0, key)
            with open(trace) as f:
                events = json.load(f)["traceEvents"]
            self.assertFalse(any(e["name"] == "allreduce" for e in events))  # no DDP on one rank
            # The predictor's DDP bucketing of this run's gradients, against the Reducer's own
            # buckets in the 2-process run.
            predicted = [nbytes for _, nbytes in load_tool("predict_scaling").profile_from_timeline(trace).buckets]
            reduces = [e for e in two_process_events() if e["pid"] == 0 and e["name"] == "allreduce"]
            self.assertEqual(predicted, [e["args"]["bytes"] for e in reduces[:len(predicted)]])
            self.assertEqual(len(reduces), 6 * len(predicted))


class BadArguments(unittest.TestCase):
    def expect_clear_error(self, args, needle):
        with tempfile.TemporaryDirectory() as d:
            r = run([config(d), *args])
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(needle, r.stderr)
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)

    def test_unwritable_timeline_and_bad_step_count(self):
        self.expect_clear_error(["--timeline", "/proc/no/such/t.json"], "/proc/no/such/t.json")
        self.expect_clear_error(["--timeline", "t.json", "--timeline-steps", "many"], "--timeline-steps")


if __name__ == "__main__":
    py_main.main()
