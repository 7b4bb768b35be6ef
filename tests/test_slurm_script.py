"""tools/slurm/train.sbatch without Slurm: run as a plain script with the variables sbatch
would set and a stand-in `scontrol` that records its arguments. Its mpirun trains 2 ranks;
a SIGTERM to the script (what --signal=B:TERM@300 sends before the time limit) reaches
every rank through mpirun, rank 0 writes a checkpoint at the step it stopped after, and
the script requeues its job; the script run again (the requeued job) resumes from that
checkpoint. Run by CTest with DPT_BUILD_DIR and DPT_SOURCE_DIR set."""
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

import py_main  # tests/py_main.py: unittest's main, with skips reported to CTest

BUILD = os.path.abspath(os.environ.get("DPT_BUILD_DIR", "build"))
SOURCE = os.environ.get("DPT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
SCRIPT = os.path.join(SOURCE, "tools", "slurm", "train.sbatch")


class SlurmScript(unittest.TestCase):
    def test_time_limit_signal_checkpoints_requeues_and_resumes(self):
        with tempfile.TemporaryDirectory() as d:
            bin_dir = os.path.join(d, "bin")
            os.mkdir(bin_dir)
            with open(os.path.join(bin_dir, "scontrol"), "w") as f:
                f.write('#!/bin/sh\necho "$@" >> "$SCONTROL_LOG"\n')
            os.chmod(os.path.join(bin_dir, "scontrol"), 0o755)
            config = os.path.join(d, "c.yaml")
            with open(config, "w") as f:
                f.write("model: {name: mlp, hidden: [32]}\n"
                        "dataset: {name: synthetic, shape: [1, 8, 8], classes: 4, size: 512}\n"
                        f"epochs: 100000\nbatch_size: 32\nthreads: 1\noutput: {{dir: {d}/run}}\n")
            env = dict(os.environ, PATH=bin_dir + ":" + os.environ["PATH"], SCONTROL_LOG=os.path.join(d, "scontrol"),
                       SLURM_NTASKS_PER_NODE="2", SLURM_CPUS_PER_TASK="1", SLURM_JOB_ID="77",
                       DPT_BUILD_DIR=BUILD, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                       OMPI_MCA_rmaps_base_oversubscribe="1")
            log = os.path.join(d, "log")
            with open(log, "w") as out:
                job = subprocess.Popen([SCRIPT, config], env=env, stdout=out, stderr=subprocess.STDOUT)
                deadline = time.time() + 60
                while "epoch 2:" not in open(log).read() and job.poll() is None and time.time() < deadline:
                    time.sleep(0.2)
                job.send_signal(signal.SIGTERM)
                job.wait(timeout=60)
            text = open(log).read()
            stopped = re.search(r"signal 15: stopping after step (\d+)", text)
            self.assertIsNotNone(stopped, text)
            step = stopped.group(1)
            self.assertTrue(os.path.exists(os.path.join(d, "run", "checkpoints", f"step-{step}.json")), text)
            self.assertIn("requeueing job 77", text)
            self.assertEqual(open(os.path.join(d, "scontrol")).read(), "requeue 77\n")

            again = subprocess.run([SCRIPT, config, "--set", "epochs=3"], env=env, capture_output=True,
                                   text=True, timeout=120)
            self.assertEqual(again.returncode, 0, again.stdout + again.stderr)
            self.assertIn(f"resumed from {d}/run/checkpoints/step-{step}.json", again.stdout)
            self.assertIn("done: final test_acc", again.stdout)
            self.assertEqual(open(os.path.join(d, "scontrol")).read(), "requeue 77\n")  # not again


if __name__ == "__main__":
    py_main.main()
