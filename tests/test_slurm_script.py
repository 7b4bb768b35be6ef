"""tools/slurm/train.sbatch without Slurm: run as a plain script with the variables sbatch
would set and a stand-in `scontrol` that records its arguments. Its mpirun trains 2 ranks.
SIGUSR1 to the script (what --signal=B:USR1@300 sends before the time limit) reaches every
rank through mpirun, rank 0 writes a checkpoint at the step it stopped after, and the
script requeues its job; the script run again (the requeued job) resumes from that
checkpoint. SIGTERM (a scancel) stops it the same way without a requeue. Run by CTest with
DPT_BUILD_DIR and DPT_SOURCE_DIR set."""
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
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        bin_dir = os.path.join(d, "bin")
        os.mkdir(bin_dir)
        with open(os.path.join(bin_dir, "scontrol"), "w") as f:
            f.write('#!/bin/sh\necho "$@" >> "$SCONTROL_LOG"\n')
        os.chmod(os.path.join(bin_dir, "scontrol"), 0o755)
        self.scontrol_log = os.path.join(d, "scontrol")
        open(self.scontrol_log, "w").close()
        self.config = os.path.join(d, "c.yaml")
        with open(self.config, "w") as f:
            f.write("model: {name: mlp, hidden: [32]}\n"
                    "dataset: {name: synthetic, shape: [1, 8, 8], classes: 4, size: 512}\n"
                    f"epochs: 100000\nbatch_size: 32\nthreads: 1\noutput: {{dir: {d}/run}}\n")
        self.env = dict(os.environ, PATH=bin_dir + ":" + os.environ["PATH"], SCONTROL_LOG=self.scontrol_log,
                        SLURM_NTASKS_PER_NODE="2", SLURM_CPUS_PER_TASK="1", SLURM_JOB_ID="77",
                        DPT_BUILD_DIR=BUILD, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        OMPI_MCA_rmaps_base_oversubscribe="1")

    def tearDown(self):
        self.dir.cleanup()

    def stop_in_epoch_2(self, sig):
        """Runs the script until epoch 2 has begun, sends it `sig`, and returns its output and
        the step whose checkpoint rank 0 wrote."""
        log = os.path.join(self.dir.name, "log")
        with open(log, "w") as out:
            job = subprocess.Popen([SCRIPT, self.config], env=self.env, stdout=out, stderr=subprocess.STDOUT)
            deadline = time.time() + 60
            while "epoch 2:" not in open(log).read() and job.poll() is None and time.time() < deadline:
                time.sleep(0.2)
            job.send_signal(sig)
            job.wait(timeout=60)
        text = open(log).read()
        stopped = re.search(rf"signal {int(signal.SIGUSR1)}: stopping after step (\d+)", text)
        self.assertIsNotNone(stopped, text)
        step = stopped.group(1)
        checkpoint = os.path.join(self.dir.name, "run", "checkpoints", f"step-{step}.json")
        self.assertTrue(os.path.exists(checkpoint), text)
        return text, checkpoint

    def test_time_limit_signal_checkpoints_requeues_and_resumes(self):
        text, checkpoint = self.stop_in_epoch_2(signal.SIGUSR1)
        self.assertIn("requeueing job 77", text)
        self.assertEqual(open(self.scontrol_log).read(), "requeue 77\n")

        again = subprocess.run([SCRIPT, self.config, "--set", "epochs=3"], env=self.env, capture_output=True,
                               text=True, timeout=120)
        self.assertEqual(again.returncode, 0, again.stdout + again.stderr)
        self.assertIn(f"resumed from {checkpoint}", again.stdout)
        self.assertIn("done: final test_acc", again.stdout)
        self.assertEqual(open(self.scontrol_log).read(), "requeue 77\n")  # not again

    def test_cancel_checkpoints_without_a_requeue(self):
        text, _ = self.stop_in_epoch_2(signal.SIGTERM)
        self.assertNotIn("requeueing", text)
        self.assertEqual(open(self.scontrol_log).read(), "")


if __name__ == "__main__":
    py_main.main()
