#!/usr/bin/env bash
# Threads of each rank of a training job during its steps, by name (/proc/PID/task/*/comm).
#   tools/bench/thread_count.sh BUILD_DIR CONFIG NP [SECONDS] [--set key=value ...]
# Starts `mpirun -np NP BUILD_DIR/train CONFIG`, waits SECONDS (default 20) for it to be in
# its steps, prints one line per rank ("rank pid: 9 threads: 1 dpt-comm, 4 train, ...")
# and kills the job.
set -euo pipefail
build=$1 config=$2 np=$3 wait_s=${4:-20}
shift $(( $# < 4 ? $# : 4 ))
out=$(mktemp -d)
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np "$np" --bind-to none \
  "$build/train" "$config" --set output.dir="$out/run" "$@" >"$out/log" 2>&1 &
job=$!
sleep "$wait_s"
for pid in $(pgrep -f "$build/train $config"); do
  [ "$(cat /proc/$pid/comm 2>/dev/null)" = train ] || continue
  names=$(cat /proc/$pid/task/*/comm 2>/dev/null | sort | uniq -c | sort -rn | awk '{printf "%s%d %s", (NR>1?", ":""), $1, $2}')
  echo "rank pid $pid: $(ls /proc/$pid/task | wc -l) threads: $names"
done
# SIGKILL, not SIGTERM: train answers SIGTERM by finishing its step and writing a checkpoint.
pkill -9 -f "output.dir=$out/run" || true
wait "$job" 2>/dev/null || true
grep -m1 -i "error" "$out/log" || true
rm -rf "$out"
