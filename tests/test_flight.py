"""tools/flight.py on made-up dumps of 4 ranks, whose answers are written out by hand below:
a hang (rank 2 never calls #3 while the others started it), a mismatch (rank 1 broadcasts
where the others all-reduce), a missing dump, a ring that wrapped, and a clean run. Then,
where train's build is present, on real dumps: fault_rank's "missing" scenario under mpirun,
in which rank 1 sleeps while rank 0 times out in its all_reduce."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import json

import py_main  # tests/py_main.py: unittest's main, with skips reported to CTest

SOURCE = os.environ.get("DPT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("DPT_BUILD_DIR", "build")
sys.path.insert(0, os.path.join(SOURCE, "tools"))
import flight  # noqa: E402

T0 = 1_700_000_000_000_000  # microseconds


def entry(seq, state, op="all_reduce", count=100, t=0, **extra):
    e = {"seq": seq, "op": op, "dtype": "f32", "count": count, "state": state, "queued_us": T0 + t}
    if op in ("all_reduce", "reduce"):
        e["reduce"] = "sum"
    if state != "queued":
        e["started_us"] = T0 + t + 10
    if state == "completed":
        e["completed_us"] = T0 + t + 20
    e.update(extra)
    return e


def dump(rank, entries, world_size=4, reason="timeout", t=10_000_000, group="world", members=None):
    members = members if members is not None else list(range(world_size))
    return {"rank": rank, "world_size": world_size, "host": "h", "pid": 1, "reason": reason,
            "time_us": T0 + t, "groups": [{"group": group, "rank": members.index(rank), "world_ranks": members,
                                           "slots": 64, "entries": entries}]}


def done(*seqs):
    return [entry(s, "completed", t=s * 1000) for s in seqs]


class MadeUpDumps(unittest.TestCase):
    def test_hang_names_the_missing_rank_and_its_last_collective(self):
        dumps = {r: dump(r, done(1, 2) + [entry(3, "started", t=2_000_000)]) for r in (0, 1, 3)}
        dumps[2] = dump(2, done(1, 2), reason="query from a rank that timed out")
        self.assertEqual(flight.summary(dumps), [
            "ranks 0, 1, 3 dumped on: timeout",
            "rank 2 dumped on: query from a rank that timed out",
            "group world (4 ranks): collective #3 all_reduce(sum) of 100 f32 did not complete",
            "  started on ranks 0, 1, 3, called 8.0 s before the dump",
            "  rank 2 never called it: last completed #2 all_reduce(sum) of 100 f32, 10.0 s before its dump",
        ])

    def test_mismatch_lists_each_call_with_its_ranks(self):
        dumps = {r: dump(r, done(1) + [entry(2, "started")]) for r in (0, 2, 3)}
        dumps[1] = dump(1, done(1) + [entry(2, "started", op="broadcast", root=0)])
        self.assertEqual(flight.summary(dumps)[1:], [
            "group world (4 ranks): ranks disagree at collective #2:",
            "  ranks 0, 2, 3: all_reduce(sum) of 100 f32",
            "  rank 1: broadcast of 100 f32 from rank 0",
        ])

    def test_missing_dump_and_queued_state(self):
        dumps = {0: dump(0, done(1) + [entry(2, "started")]), 1: dump(1, done(1) + [entry(2, "queued")])}
        lines = flight.summary(dumps)
        self.assertEqual(lines[0], "no dump from ranks 2, 3 (of 4)")
        self.assertIn("  started on rank 0, called 10.0 s before the dump", lines)
        self.assertIn("  queued on rank 1, called 10.0 s before the dump", lines)

    def test_wrapped_ring_counts_older_calls_as_passed(self):
        # Rank 0's ring holds #5..#8 only; rank 1 stalls before #8.
        dumps = {0: dump(0, done(5, 6, 7) + [entry(8, "started")], world_size=2),
                 1: dump(1, done(2, 3, 4, 5, 6, 7), world_size=2)}
        self.assertEqual(flight.summary(dumps)[1:], [
            "group world (2 ranks): collective #8 all_reduce(sum) of 100 f32 did not complete",
            "  started on rank 0, called 10.0 s before the dump",
            "  rank 1 never called it: last completed #7 all_reduce(sum) of 100 f32, 10.0 s before its dump",
        ])

    def test_clean_run_and_sub_groups(self):
        dumps = {r: dump(r, done(1, 2), world_size=2, reason="SIGUSR2") for r in (0, 1)}
        dumps[0]["groups"].append({"group": "group[0]", "rank": 0, "world_ranks": [0], "slots": 64, "entries": []})
        self.assertEqual(flight.summary(dumps), [
            "ranks 0, 1 dumped on: SIGUSR2",
            "group world (2 ranks): every rank completed every collective up to #2",
            "group group[0] (1 ranks): no collectives recorded",
        ])


class RealDumps(unittest.TestCase):
    def test_fault_rank_missing(self):
        program = os.path.join(BUILD, "fault_rank")
        if not os.path.exists(program) or not shutil.which("mpirun"):
            self.skipTest("needs fault_rank (DPT_BUILD_DIR) and mpirun")
        with tempfile.TemporaryDirectory() as directory:
            env = dict(os.environ, DPT_FLIGHT_DIR=directory, OMPI_ALLOW_RUN_AS_ROOT="1",
                       OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            job = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", program,
                                  "missing", "1"], env=env, capture_output=True, text=True, timeout=120)
            self.assertNotEqual(job.returncode, 0, job.stderr)
            dumps = flight.load(directory)
            self.assertEqual(sorted(dumps), [0, 1], job.stderr)
            with open(os.path.join(directory, "rank-0.json")) as f:
                self.assertEqual(json.load(f)["groups"][0]["entries"][-1]["state"], "started")
            lines = flight.summary(dumps)
            self.assertIn("group world (2 ranks): collective #2 all_reduce(sum) of 1000 f32 did not complete",
                          lines)
            self.assertTrue(any(l.startswith("  started on rank 0, called 1.") for l in lines), lines)
            self.assertTrue(any(l.startswith("  rank 1 never called it: last completed #1 barrier,") for l in lines),
                            lines)


if __name__ == "__main__":
    py_main.main()
