"""train with parallel.pp > 1, end to end: mlp (no batch norm, so cutting a batch into
micro-batches changes only the order of the sums) on synthetic data, 2 stages on 2
processes, ends with the weights and losses of the same run on one process within 1e-5;
the stage layout and the bubble fraction are printed; impossible layouts are one-line
errors. The arithmetic of dp x pp against one process is tests/test_mpi_pipeline.cpp's.
Run by CTest with DPT_BUILD_DIR set."""
import json
import os
import struct
import subprocess
import tempfile
import unittest

import py_main  # tests/py_main.py: unittest's main, with skips reported to CTest

BUILD = os.environ.get("DPT_BUILD_DIR", "build")
TRAIN = os.path.join(BUILD, "train")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")


def config(directory, name, extra=""):
    path = os.path.join(directory, name + ".yaml")
    with open(path, "w") as f:
        f.write("model: {name: mlp, hidden: [64, 32]}\n"
                "dataset: {name: synthetic, shape: [1, 8, 8], classes: 10, size: 640}\n"
                "epochs: 2\nbatch_size: 32\nthreads: 1\n"
                "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
                f"output: {{dir: {directory}/{name}}}\n" + extra)
    return path


def run(path, np, *overrides):
    sets = [arg for o in overrides for arg in ("--set", o)]
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np), TRAIN, path, *sets]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=200)


def read_safetensors(path):
    """{name: list of floats} of an f32 safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", (name, entry["dtype"])
        begin, end = entry["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        out[name] = struct.unpack(f"<{len(raw) // 4}f", raw)
    return out


def read_metrics(directory):
    with open(os.path.join(directory, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


class PipelineTrain(unittest.TestCase):
    def test_two_stages_train_as_one_process(self):
        with tempfile.TemporaryDirectory() as d:
            one = run(config(d, "one"), 1)
            self.assertEqual(one.returncode, 0, one.stderr)
            pp = run(config(d, "pp", "parallel: {pp: 2}\npipeline: {micro_batches: 4}\n"
                            "checkpoint: {every_epochs: 0}\n"), 2)
            self.assertEqual(pp.returncode, 0, pp.stderr)
            self.assertIn("pipeline: 2 stages x 1 data-parallel replicas", pp.stdout)
            self.assertIn("stage 1 on rank 1: 5\n", pp.stdout)  # the mlp's units: 0-2, 3-4, 5 (the last Linear)
            bubbles = [line for line in pp.stdout.splitlines() if "pipeline bubble" in line]
            self.assertEqual(len(bubbles), 2, pp.stdout)  # one per epoch
            measured = float(bubbles[-1].split()[2])
            self.assertGreater(measured, 0.0)
            self.assertLess(measured, 1.0)
            self.assertIn("0.200 for equal stages", bubbles[-1])  # (2 - 1) / (4 + 2 - 1)

            a = read_safetensors(os.path.join(d, "one", "model.safetensors"))
            b = read_safetensors(os.path.join(d, "pp", "model.safetensors"))
            self.assertEqual(sorted(a), sorted(b))
            for name in a:
                scale = max(abs(x) for x in a[name])
                diff = max(abs(x - y) for x, y in zip(a[name], b[name]))
                self.assertLessEqual(diff / scale, 1e-5, name)
            # Different weights would show: they moved from their start by much more.
            for ma, mb in zip(read_metrics(os.path.join(d, "one")), read_metrics(os.path.join(d, "pp"))):
                self.assertAlmostEqual(ma["train_loss"], mb["train_loss"], delta=1e-5 * ma["train_loss"])
                self.assertAlmostEqual(ma["test_acc"], mb["test_acc"], delta=1e-9)

    def test_impossible_layouts_are_one_line_errors(self):
        with tempfile.TemporaryDirectory() as d:
            path = config(d, "bad", "checkpoint: {every_epochs: 0}\n")
            cases = [
                (2, ["parallel.pp=3"], "parallel: tp 1 x pp 3 does not divide the world size 2"),
                (2, ["parallel.pp=2", "parallel.dp=2"], "parallel: dp 2 x tp 1 x pp 2 = 4 ranks, but the world size is 2"),
                (2, ["parallel.pp=2", "pipeline.micro_batches=5"], "5 micro-batches do not divide batch_size 32"),
                (2, ["parallel.pp=2", "distributed.sync_bn=true"], "set distributed.sync_bn: false"),
                (2, ["parallel.pp=2", "distributed.compress=bf16"], "set distributed.compress: none"),
                (2, ["parallel.pp=2", "checkpoint.every_epochs=1"], "set checkpoint.every_epochs: 0"),
                (2, ["parallel.pp=4"], "parallel: tp 1 x pp 4 does not divide the world size 2"),
            ]
            for np, overrides, message in cases:
                with self.subTest(overrides=overrides):
                    r = run(path, np, *overrides)
                    self.assertNotEqual(r.returncode, 0)
                    self.assertIn(message, r.stderr)
            r = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", TRAIN, path,
                                "--set", "parallel.pp=2", "--resume", "auto"],
                               env=ENV, capture_output=True, text=True, timeout=200)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("--resume: a run with parallel.pp: 2 starts from scratch", r.stderr)
            # More stages than the model has units (mlp [64, 32]: 3).
            r = run(path, 4, "parallel.pp=4")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("cannot cut the model into 4 stages: it has 3 units", r.stderr)


if __name__ == "__main__":
    py_main.main()
