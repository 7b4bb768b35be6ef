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

best() { sort -t: -k2 -g | tail -1; }
dpt_runs=() torch_runs=()
for r in $(seq "$rounds"); do
  dpt_runs+=("$("$DPT_ROOT/build/bench_train" "$model" "$batch" "$threads" 30 $shape)")
  torch_runs+=("$(OMP_NUM_THREADS=$threads $py "$DPT_ROOT/tools/bench/torch_train.py" "$model" "$batch" "$threads" 30 $shape)")
done
printf '%s\n' "${dpt_runs[@]}" "${torch_runs[@]}" | $py -c '
import json, sys
runs = [json.loads(l) for l in sys.stdin if l.strip()]
dpt = max((r for r in runs if r["framework"] == "dpt"), key=lambda r: r["images_per_sec"])
pt = max((r for r in runs if r["framework"] != "dpt"), key=lambda r: r["images_per_sec"])
print(f"{dpt[\"model\"]}, batch {dpt[\"batch\"]}, {dpt[\"threads\"]} threads, best of {len(runs)//2} runs each")
print(f"{\"framework\":<20}{\"ms/step\":>10}{\"images/s\":>12}{\"peak RSS MB\":>14}")
for r in (dpt, pt):
    print(f"{r[\"framework\"]:<20}{r[\"ms_per_step\"]:>10.2f}{r[\"images_per_sec\"]:>12.1f}{r[\"peak_rss_mb\"]:>14.1f}")
print(f"ratio dpt/pytorch: {dpt[\"images_per_sec\"] / pt[\"images_per_sec\"]:.2f}x")
'
