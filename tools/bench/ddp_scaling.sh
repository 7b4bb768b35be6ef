#!/usr/bin/env bash
# DDP scaling on this machine, dpt beside PyTorch DDP (gloo): np=1 and np=2, each rank one
# thread bound to its own core, the same model and per-rank batch. Prints images/s and
# scaling efficiency = throughput(2) / (2 x throughput(1)), best of `rounds` runs each.
#   tools/bench/ddp_scaling.sh [model] [batch per rank] [rounds]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "ok installed" ||
  { echo "dpt: installing python3-torch"; apt-get install -y -qq --no-install-recommends python3-torch >/dev/null; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=${1:-mnist_cnn}
batch=${2:-64}
rounds=${3:-3}
py=/usr/bin/python3
launch() { mpirun -np "$1" --bind-to core --map-by core "${@:2}"; }
runs=()
for r in $(seq "$rounds"); do
  for np in 1 2; do
    runs+=("$(launch $np "$DPT_ROOT/build/bench_ddp" "$model" "$batch" 1 40)")
    runs+=("$(OMP_NUM_THREADS=1 launch $np $py "$DPT_ROOT/tools/bench/torch_ddp.py" "$model" "$batch" 1 40 $((29500 + r)))")
  done
done
printf '%s\n' "${runs[@]}" | $py -c '
import json, sys
runs = [json.loads(l) for l in sys.stdin if l.strip()]
best = {}
for r in runs:
    key = (r["framework"], r["np"])
    if key not in best or r["images_per_sec"] > best[key]["images_per_sec"]:
        best[key] = r
frameworks = sorted({k[0] for k in best}, key=lambda f: f != "dpt")
m = runs[0]
print(f"{m[\"model\"]}, batch {m[\"batch_per_rank\"]} per rank, 1 thread per rank, best of {len(runs)//4} runs")
print(f"{\"framework\":<28}{\"np=1 img/s\":>12}{\"np=2 img/s\":>12}{\"efficiency\":>12}")
for f in frameworks:
    one, two = best[(f, 1)]["images_per_sec"], best[(f, 2)]["images_per_sec"]
    print(f"{f:<28}{one:>12.1f}{two:>12.1f}{two / (2 * one):>12.3f}")
'
