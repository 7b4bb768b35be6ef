#!/usr/bin/env bash
# What timing and tracing cost: the same steps with this tree's build/ and with a build of
# an earlier commit (BASE: a folder holding its bench_train, train and libdpt.so), and
# train with --timeline on and off. Runs alternate; the best of `rounds` counts.
#   tools/bench/trace_overhead.sh BASE [rounds]
# e.g. git worktree add /tmp/base <commit> && (cd /tmp/base && cmake -S . -B build -G Ninja
#   && ninja -C build train bench_train) && tools/bench/trace_overhead.sh /tmp/base/build 5
set -euo pipefail
DPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
base=${1:?usage: trace_overhead.sh BASE [rounds]}
rounds=${2:-5}
for f in bench_train train libdpt.so; do
  [ -e "$base/$f" ] || { echo "error: $base/$f not found (BASE: a build folder of an earlier commit)" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
label() { sed "s/\"framework\": *\"dpt\"/\"framework\": \"$1\"/"; }
# train, one process, one thread, 300 steps of mnist_cnn on Fashion-MNIST: images/s of the epoch.
train_line() {  # label, build folder, extra arguments
  local dir="$tmp/run"
  LD_LIBRARY_PATH="$2" "$2/train" "$DPT_ROOT/configs/default.yaml" --set epochs=1 --set max_steps_per_epoch=300 \
    --set threads=1 --set "output.dir=$dir" "${@:3}" > /dev/null
  /usr/bin/python3 -c "import json,sys; m=json.loads(open(sys.argv[1]).readline()); \
print(json.dumps({'framework': sys.argv[2], 'model': 'train mnist_cnn', 'images_per_sec': m['images_per_sec']}))" \
    "$dir/metrics.jsonl" "$1"
}
runs=()
for r in $(seq "$rounds"); do
  for model in mnist_cnn resnet20; do
    shape="1 28 28" steps=200
    [ "$model" = resnet20 ] && shape="3 32 32" steps=20
    runs+=("$(LD_LIBRARY_PATH="$base" "$base/bench_train" $model 64 1 $steps $shape | label "base $model")")
    runs+=("$("$DPT_ROOT/build/bench_train" $model 64 1 $steps $shape | label "this $model")")
  done
  runs+=("$(train_line "base train" "$base")")
  runs+=("$(train_line "this train" "$DPT_ROOT/build")")
  runs+=("$(train_line "this train --timeline" "$DPT_ROOT/build" --timeline "$tmp/t.json")")
done
printf '%s\n' "${runs[@]}" | /usr/bin/python3 "$DPT_ROOT/tools/bench/report.py" variants
