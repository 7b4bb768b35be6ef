#!/usr/bin/env bash
# Fuzzes the readers of untrusted bytes with libFuzzer under AddressSanitizer and
# UndefinedBehaviorSanitizer: the IDX reader, the CIFAR-10 reader, the config loader and
# the checkpoint readers (safetensors tensor files, the checkpoint JSON). Each target runs
# for SECONDS (default 60), one after another, in one process (the other core stays free).
#   tools/fuzz.sh [SECONDS] [TARGET ...]        e.g. tools/fuzz.sh 600 idx config
# Installs clang, its runtimes and lld when missing (Debian: clang, libclang-rt-dev, lld;
# only this script needs them), builds build-fuzz/ with -DDPT_FUZZ=ON, keeps each target's
# corpus in build-fuzz/corpus/TARGET (seeded from tests/fuzz/corpus/TARGET), logs in
# build-fuzz/logs/, crashing inputs in build-fuzz/artifacts/TARGET/, and one line per run in
# build-fuzz/history.tsv. Exits 1 when a target found a crash: fix it, then copy the input
# into tests/fuzz/regressions/TARGET/ so that test_fuzz_regressions replays it for good.
set -euo pipefail
DPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
shift || true

fuzz_packages=(clang libclang-rt-dev lld cmake ninja-build libyaml-cpp-dev zlib1g-dev)
missing=()
for p in "${fuzz_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fuzz: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build="$DPT_ROOT/build-fuzz"
cmake -S "$DPT_ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DDPT_FUZZ=ON >/dev/null
cmake --build "$build" -j 2 >/dev/null

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$build"/fuzz_*; do targets+=("$(basename "$f" | sed 's/^fuzz_//')"); done
fi

# Longer inputs only where the format needs them: two CIFAR-10 records are 6146 bytes, a
# checkpoint JSON with a dropout generator's state about 7 KB.
max_len() { case "$1" in cifar10) echo 8192 ;; checkpoint) echo 16384 ;; *) echo 4096 ;; esac; }

mkdir -p "$build/logs"
[ -f "$build/history.tsv" ] || printf 'date\ttarget\tseconds\truns\texec_per_s\tcrashed\n' >"$build/history.tsv"
status=0
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t" artifacts="$build/artifacts/$t" log="$build/logs/$t.log"
  mkdir -p "$corpus" "$artifacts"
  seeds=()
  [ -d "$DPT_ROOT/tests/fuzz/corpus/$t" ] && seeds+=("$DPT_ROOT/tests/fuzz/corpus/$t")
  crashed=no
  # No single allocation above 512 MB from an input of a few KB: a size taken from a
  # header without checking it against the file is a bug, and this makes it a crash.
  if ! "$build/fuzz_$t" -max_total_time="$seconds" -max_len="$(max_len "$t")" -malloc_limit_mb=512 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "${seeds[@]}" >"$log" 2>&1; then
    crashed=yes
    status=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$seconds" "${runs:-0}" "${rate:-0}" "$crashed" \
    >>"$build/history.tsv"
  echo "fuzz $t: ${runs:-0} inputs in ${seconds} s (${rate:-0}/s), ${cov:-cov: ?}, corpus $(ls "$corpus" | wc -l)," \
       "crash: $crashed"
  if [ "$crashed" = yes ]; then
    grep -E 'ERROR|SUMMARY|round-trip|Test unit written' "$log" | head -5
  fi
done
echo "totals so far (build-fuzz/history.tsv):"
awk -F'\t' 'NR > 1 { s[$2] += $3; r[$2] += $4 } END { for (t in s) printf "  %-10s %6d s %12d inputs\n", t, s[t], r[t] }' \
  "$build/history.tsv"
exit $status
