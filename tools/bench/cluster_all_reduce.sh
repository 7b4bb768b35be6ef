#!/usr/bin/env bash
# DDP's all-reduce across simulated hosts (tools/cluster.sh): flat, hierarchical, and
# hierarchical with bf16 between hosts, measured in turn within one job (bench_ddp), `rounds`
# times over, so that the machine's drifting speed affects each alike. Prints a table of the
# median and spread of the step time, the communication not hidden by backward, and the bytes
# a step sends across the hosts' links (their interfaces' counters), each against flat.
#   tools/bench/cluster_all_reduce.sh [--nodes N] [--per-node P] [--link RATE] [--rounds R]
#                                     [--steps S] [model] [batch per rank]
# Defaults: 2 hosts x 2 processes, 1gbit, 5 rounds of 20 steps, mnist_cnn, 64.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
nodes=2 per_node=2 link=1gbit rounds=5 steps=20
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --per-node) per_node=$2; shift 2 ;;
    --link) link=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -*) echo "cluster_all_reduce.sh: unknown option '$1'" >&2; exit 2 ;;
    *) break ;;
  esac
done
model=${1:-mnist_cnn}
batch=${2:-64}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
link_args=()
[ "$link" = none ] || link_args=(--link "$link")
echo "tools/cluster.sh --nodes $nodes --per-node $per_node ${link_args[*]} -- build/bench_ddp $model $batch 1 $steps 25 false/none,true/none,true/bf16 $rounds"
"$root/tools/cluster.sh" --nodes "$nodes" --per-node "$per_node" "${link_args[@]}" -- \
  "$root/build/bench_ddp" "$model" "$batch" 1 "$steps" 25 false/none,true/none,true/bf16 "$rounds" |
  tee /dev/stderr | python3 "$root/tools/bench/report.py" all_reduce
