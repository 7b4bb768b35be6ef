#!/usr/bin/env bash
# A change's effect on training speed: bench_train of a baseline build ("before") and of
# this checkout's build ("after"), with PyTorch beside them, alternating round by round so
# that the machine's drift touches all three alike. Reports medians and ranges (report.py
# builds). Build the baseline first, e.g. from a worktree of the commit before the change.
#   tools/bench/vs_build.sh BASELINE_BUILD_DIR [model] [batch] [threads] [rounds]
# DPT_BUILD_DIR: this checkout's build folder, as for tools/test.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
[ $# -ge 1 ] && [ -x "$1/bench_train" ] || { echo "vs_build.sh: expected a build folder with bench_train, got '${1:-}'" >&2; exit 2; }
baseline=$1
model=${2:-mnist_cnn}
batch=${3:-128}
threads=${4:-$(nproc)}
rounds=${5:-5}
shape="1 28 28"
[ "$model" = "mnist_cnn" ] || shape="3 32 32"
py=/usr/bin/python3

tagged() { sed "s/^{/{\"build\":\"$1\",/"; }
for r in $(seq "$rounds"); do
  "$baseline/bench_train" "$model" "$batch" "$threads" 30 $shape | tagged before
  "$DPT_BUILD/bench_train" "$model" "$batch" "$threads" 30 $shape | tagged after
  OMP_NUM_THREADS=$threads $py "$DPT_ROOT/tools/bench/torch_train.py" "$model" "$batch" "$threads" 30 $shape
done | $py "$DPT_ROOT/tools/bench/report.py" builds
