"""The main() of every tests/test_*.py, as tests/mpi_main.cpp is the MPI binaries': unittest's,
except that a run in which every case was skipped exits DPT_TEST_SKIP_CODE (CMakeLists.txt
sets it; CTest's SKIP_RETURN_CODE), so a file that checked nothing is reported as Skipped,
never Passed, and a run in which some were skipped says which and why in one line."""
import os
import sys
import unittest


def main():
    result = unittest.main(module="__main__", verbosity=2, exit=False).result
    if result.skipped:
        cases = ", ".join(f"{case.id()} ({why})" for case, why in result.skipped)
        print(f"{len(result.skipped)} of {result.testsRun} cases skipped: {cases}", flush=True)
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun > 0 and len(result.skipped) == result.testsRun:
        sys.exit(int(os.environ.get("DPT_TEST_SKIP_CODE", "77")))
