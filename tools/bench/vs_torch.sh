#!/usr/bin/env bash
# dpt against PyTorch (Debian's python3-torch, CPU), side by side in one run: the same
# model, batch, optimizer, thread count and synthetic input. Runs each `rounds` times,
# alternating, and reports the best of each, images/s, the ratio and peak RSS.
#   tools/bench/vs_torch.sh [model] [batch] [threads] [rounds]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "ok installed" ||
  { echo "dpt: installing python3-torch"; apt-get install -y -qq --no-install-recommends python3-torch >/dev/null; }

model=${1:-mnist_cnn}
batch=${2:-128}
threads=${3:-$(nproc)}
rounds=${4:-3}
shape="1 28 28"
[ "$model" = "mnist_cnn" ] || shape="3 32 32"
py=/usr/bin/python3  # Debian's python, the one python3-torch installs into

dpt_runs=() torch_runs=()
for r in $(seq "$rounds"); do
  dpt_runs+=("$("$DPT_ROOT/build/bench_train" "$model" "$batch" "$threads" 30 $shape)")
  torch_runs+=("$(OMP_NUM_THREADS=$threads $py "$DPT_ROOT/tools/bench/torch_train.py" "$model" "$batch" "$threads" 30 $shape)")
done
printf '%s\n' "${dpt_runs[@]}" "${torch_runs[@]}" | $py "$DPT_ROOT/tools/bench/report.py" vs_torch
