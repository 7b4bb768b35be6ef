#!/usr/bin/env bash
# The default training job: installs what is missing, builds, and trains.
#   tools/run.sh [CONFIG] [-np N] [--nodes H] [--set key=value ...] [--resume PATH|auto]
# CONFIG defaults to configs/default.yaml, N to 2. Runs `mpirun -np N build/train CONFIG`;
# with --nodes, N/H processes on each of H simulated hosts (tools/cluster.sh).
# DPT_BUILD_DIR: another build folder, as for tools/test.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

config="$DPT_ROOT/configs/default.yaml"
np=2
nodes=""
train_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -np|--np) np="$2"; shift 2 ;;
    --nodes) nodes="$2"; shift 2 ;;
    --set) train_args+=(--set "$2"); shift 2 ;;
    --resume) train_args+=(--resume "$2"); shift 2 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) config="$1"; shift ;;
  esac
done

cd "$DPT_ROOT"
if [ -n "$nodes" ]; then
  [[ "$nodes" =~ ^[1-9][0-9]*$ ]] && [ $((np % nodes)) -eq 0 ] ||
    { echo "run.sh: --nodes expects a count of hosts that divides -np $np, got '$nodes'" >&2; exit 2; }
  exec tools/cluster.sh --nodes "$nodes" --per-node $((np / nodes)) -- "$DPT_BUILD/train" "$config" "${train_args[@]}"
fi

# Open MPI binds each rank to one core when np <= 2, which would leave a rank with one
# thread; give each rank its share of the cores instead (docs/design.md, "Threads and binding").
cores=$(nproc)
if [ "$np" -le "$cores" ]; then
  binding=(--map-by "slot:PE=$((cores / np))" --bind-to core)
else
  echo "dpt: $np processes on $cores cores: oversubscribing"
  binding=(--oversubscribe --bind-to none)
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # these machines run as root
exec mpirun -np "$np" "${binding[@]}" "$DPT_BUILD/train" "$config" "${train_args[@]}"
