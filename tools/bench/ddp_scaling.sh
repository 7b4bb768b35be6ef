#!/usr/bin/env bash
# DDP scaling on this machine, dpt beside PyTorch DDP (gloo): np=1 and np=2, each rank one
# thread bound to its own core, the same model and per-rank batch. Prints images/s and
# scaling efficiency = throughput(2) / (2 x throughput(1)), best of `rounds` runs each,
# dpt with its buckets all-reduced through MPI instead of in shared memory, and the same
# ranks run without communicating: the ceiling this machine allows.
#   tools/bench/ddp_scaling.sh [model] [batch per rank] [rounds] [steps per run]
# (steps: 100 by default; the host's speed drifts, and shorter runs let it decide the result)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh"
dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "ok installed" ||
  { echo "dpt: installing python3-torch"; apt-get install -y -qq --no-install-recommends python3-torch >/dev/null; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=${1:-mnist_cnn}
batch=${2:-64}
rounds=${3:-3}
steps=${4:-100}
py=/usr/bin/python3
launch() { mpirun -np "$1" --bind-to core --map-by core "${@:2}"; }
runs=()
for r in $(seq "$rounds"); do
  for np in 1 2; do
    runs+=("$(launch $np "$DPT_ROOT/build/bench_ddp" "$model" "$batch" 1 "$steps")")
    # Buckets in private memory, all-reduced through MPI, as before shm_buffer.h.
    runs+=("$(DPT_SHM_BUFFERS=0 launch $np -x DPT_SHM_BUFFERS "$DPT_ROOT/build/bench_ddp" "$model" "$batch" 1 "$steps" |
              sed 's/"framework": *"dpt"/"framework": "dpt, buckets through MPI"/')")
    # The same ranks with no communication at all: what sharing the machine costs.
    runs+=("$(DPT_BENCH_NO_DDP=1 launch $np -x DPT_BENCH_NO_DDP "$DPT_ROOT/build/bench_ddp" "$model" "$batch" 1 "$steps" |
              sed 's/"framework": *"dpt"/"framework": "dpt, ranks not communicating"/')")
    runs+=("$(OMP_NUM_THREADS=1 launch $np $py "$DPT_ROOT/tools/bench/torch_ddp.py" "$model" "$batch" 1 "$steps" $((29500 + r)))")
  done
done
printf '%s\n' "${runs[@]}" | $py "$DPT_ROOT/tools/bench/report.py" scaling
