#!/usr/bin/env bash
# The default training job: installs what is missing, builds, and trains.
#   tools/run.sh [CONFIG] [-np N] [--set key=value ...] [--resume PATH|auto]
# CONFIG defaults to configs/default.yaml, N to 2. Runs `mpirun -np N build/train CONFIG`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

config="$DPT_ROOT/configs/default.yaml"
np=2
train_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -np|--np) np="$2"; shift 2 ;;
    --set) train_args+=(--set "$2"); shift 2 ;;
    --resume) train_args+=(--resume "$2"); shift 2 ;;
    -h|--help) sed -n '2,4p' "$0"; exit 0 ;;
    *) config="$1"; shift ;;
  esac
done

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
# Ranks see a pseudo-terminal whatever mpirun writes to: tell them what it really is.
if [ -t 1 ]; then export DPT_TTY=1; else export DPT_TTY=0; fi
cd "$DPT_ROOT"
exec mpirun -np "$np" "${binding[@]}" -x DPT_TTY "$DPT_ROOT/build/train" "$config" "${train_args[@]}"
