#!/usr/bin/env bash
# Step time of ZeRO-1 (optimizer.shard: true) against plain DDP: RUNS alternating runs of
# each on synthetic data, the median and spread of ms per step from each run's summary.json
# (training images per second over the global batch). Usage:
#   tools/bench/zero_step_time.sh MODEL SHAPE BATCH STEPS [NP=2] [RUNS=5]
#   e.g. tools/bench/zero_step_time.sh mnist_cnn '[1, 28, 28]' 128 40
# LAUNCH replaces the launcher (default: mpirun --oversubscribe -np NP), e.g. across 2
# simulated hosts on a 1 Gbit/s link:
#   LAUNCH="tools/cluster.sh --nodes 2 --per-node 1 --link 1gbit --" tools/bench/zero_step_time.sh ...
set -euo pipefail
model=$1 shape=$2 batch=$3 steps=$4 np=${5:-2} runs=${6:-5}
build=${DPT_BUILD_DIR:-build}
read -r -a launch <<<"${LAUNCH:-mpirun --allow-run-as-root --oversubscribe -np $np}"
out=$(mktemp -d /tmp/dpt_zero_bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
cat >"$out/config.yaml" <<YAML
model: {name: $model}
dataset: {name: synthetic, shape: $shape, classes: 10, size: $((batch * np * steps))}
epochs: 1
batch_size: $batch
eval_batch_size: 500
threads: 1
optimizer: {name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 5.0e-4}
YAML
for run in $(seq "$runs"); do
  for shard in false true; do
    "${launch[@]}" "$build/train" "$out/config.yaml" \
      --set optimizer.shard=$shard --set output.dir="$out/$shard-$run" >/dev/null
    python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(1000*s['global_batch']/s['images_per_sec'])" \
      "$out/$shard-$run/summary.json" >>"$out/$shard.ms"
  done
done
python3 - "$out" "$model" "$np" <<'PY'
import statistics, sys
out, model, np = sys.argv[1:]
med = {}
for shard in ("false", "true"):
    ms = [float(x) for x in open(f"{out}/{shard}.ms")]
    med[shard] = statistics.median(ms)
    name = "ZeRO-1" if shard == "true" else "DDP"
    print(f"{model} np {np} {name:6}: median {med[shard]:.1f} ms/step, min {min(ms):.1f}, max {max(ms):.1f} "
          f"({', '.join(f'{x:.1f}' for x in ms)})")
print(f"{model} np {np} ZeRO-1 / DDP: {med['true'] / med['false']:.3f}")
PY
