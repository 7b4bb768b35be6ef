#!/usr/bin/env bash
# A scaling sweep: trains CONFIG at each process count, or each layout of hosts x processes
# at each link rate, and writes runs/scaling/<name>/ (or --out DIR) results.csv, results.md
# and scaling.png (tools/scaling_report.py), one folder per run (np<N>/r<k>, <H>x<P>/r<k>,
# <H>x<P>-<link>/r<k>, each -<variant> with --variant: metrics.jsonl, summary.json,
# timeline.json, run.json).
#   tools/scaling.sh CONFIG [--np 1,2,4,8 | --cluster 1x1,2x1,2x2 [--link 1gbit,10gbit,none]]
#     [--steps K | --epochs E] [--weak | --strong] [--threads T] [--repeats R] [--target ACC]
#     [--slots S] [--name NAME] [--out DIR] [--mpirun-args "ARGS"] [--wait-idle]
#     [--variant "NAME key=value ..."] [--set key=value ...]
# --weak (default) keeps the config's batch per rank; --strong keeps the global batch of the
# smallest np (batch_size x that np) and divides it among the ranks. Each rank gets T compute
# threads (1) bound to its own cores; more processes than slots (cores / T, or --slots: the
# ranks all the hosts hold, e.g. GPUs) oversubscribe, with a warning. --mpirun-args go to
# every mpirun (a --map-by or --bind-to there replaces ours). The best of R repeats counts;
# the report also gives the median and range of the R.
# --cluster: H hosts of P processes each, simulated by tools/cluster.sh (network namespaces,
# TCP between hosts), at each --link rate (a tc rate, or none: unlimited; default none). A
# 1xP layout is one host: the plain mpirun of --np P, run once whatever the links.
# --variant: every run once per variant, with the variant's --set keys (e.g. "flat
# distributed.hierarchical=false"), taking turns within each repeat.
# --wait-idle: before each run, wait (up to 10 minutes) until the machine's cores have been
# at least 90% idle for 2 seconds, for timings on a machine others share.
# Runs DPT_BUILD_DIR/train (default build/, as tools/setup.sh builds it).
set -euo pipefail
DPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
train="$(cd "$DPT_ROOT" && realpath -m "${DPT_BUILD_DIR:-build}")/train"
usage() { sed -n '7,10p' "$0" | sed 's/^# \{0,1\}//'; }
fail() { echo "error: $*" >&2; exit 2; }

config="" nps="" cluster="" links="" steps="" epochs="" mode=weak threads=1 repeats=1 target="" slots="" name="" out=""
wait_idle=0 mpirun_args=() sets=() variants=()
while [ $# -gt 0 ]; do
  case "$1" in
    --np) nps="${2:?}"; shift 2 ;;
    --cluster) cluster="${2:?}"; shift 2 ;;
    --link) links="${2:?}"; shift 2 ;;
    --variant) variants+=("${2:?}"); shift 2 ;;
    --steps) steps="${2:?}"; shift 2 ;;
    --epochs) epochs="${2:?}"; shift 2 ;;
    --weak) mode=weak; shift ;;
    --strong) mode=strong; shift ;;
    --threads) threads="${2:?}"; shift 2 ;;
    --repeats) repeats="${2:?}"; shift 2 ;;
    --target) target="${2:?}"; shift 2 ;;
    --slots) slots="${2:?}"; shift 2 ;;
    --name) name="${2:?}"; shift 2 ;;
    --out) out="${2:?}"; shift 2 ;;
    --wait-idle) wait_idle=1; shift ;;
    --mpirun-args) read -r -a mpirun_args <<< "${2:?}"; shift 2 ;;
    --set) sets+=(--set "${2:?}"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) fail "unknown option '$1' ($(usage | head -1 | sed 's/^ *//'))" ;;
    *) [ -z "$config" ] || fail "two configs: '$config' and '$1'"; config="$1"; shift ;;
  esac
done
[ -n "$config" ] || fail "no config ($(usage | head -1 | sed 's/^ *//'))"
[ -f "$config" ] || fail "config '$config' not found"
[ -z "$nps" ] || [ -z "$cluster" ] || fail "give --np or --cluster, not both"
[ -z "$links" ] || [ -n "$cluster" ] || fail "--link needs --cluster (the rate of the links between hosts)"
[ -n "$nps$cluster" ] || nps="1,2,4"
[ -z "$nps" ] || [[ "$nps" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
  fail "--np expects process counts like 1,2,4, got '$nps'"
[ -z "$cluster" ] || [[ "$cluster" =~ ^[1-9][0-9]*x[1-9][0-9]*(,[1-9][0-9]*x[1-9][0-9]*)*$ ]] ||
  fail "--cluster expects layouts HOSTSxPROCESSES like 1x2,2x1,2x2, got '$cluster'"
links=${links:-none}
IFS=, read -r -a link_list <<< "$links"
for link in "${link_list[@]}"; do
  # What tools/cluster.sh (and tc) take.
  [[ "$link" =~ ^(none|[0-9]+(\.[0-9]+)?(kbit|mbit|gbit))$ ]] ||
    fail "--link expects rates like 1gbit,10gbit,100mbit or none, got '$link' in '$links'"
done
[ -z "$steps" ] || [ -z "$epochs" ] || fail "give --steps or --epochs, not both"
for v in "$steps" "$epochs" "$threads" "$repeats" "$slots"; do
  [ -z "$v" ] || [[ "$v" =~ ^[1-9][0-9]*$ ]] || fail "expected a positive whole number, got '$v'"
done
[ -z "$target" ] || [[ "$target" =~ ^0?\.[0-9]+$|^1(\.0*)?$ ]] || fail "--target expects an accuracy in (0, 1], got '$target'"
variant_names=()
for v in "${variants[@]}"; do
  [[ "$v" =~ ^[A-Za-z][A-Za-z0-9_]*( +[^ =]+=[^ ]*)+$ ]] ||
    fail "--variant expects \"NAME key=value ...\" (e.g. \"flat distributed.hierarchical=false\"), got '$v'"
  [[ " ${variant_names[*]} " != *" ${v%% *} "* ]] || fail "--variant: two variants named '${v%% *}'"
  variant_names+=("${v%% *}")
done
[ ${#variants[@]} -gt 0 ] || variants=("")  # one run each, as configured
name=${name:-$(basename "${config%.*}")}
out=${out:-$DPT_ROOT/runs/scaling/$name}
[ -x "$train" ] || fail "$train not built (tools/run.sh, or: ninja -C $(dirname "$train") train)"

# What to run: "HOSTS PROCESSES_A_HOST LINK FOLDER" (LINK -: one host, the plain mpirun).
layouts=()
if [ -n "$nps" ]; then
  IFS=, read -r -a np_list <<< "$nps"
  for np in "${np_list[@]}"; do layouts+=("1 $np - np$np"); done
else
  IFS=, read -r -a cluster_list <<< "$cluster"
  np_list=()
  for layout in "${cluster_list[@]}"; do
    hosts=${layout%x*} per_host=${layout#*x}
    np_list+=($((hosts * per_host)))
    if [ "$hosts" = 1 ]; then
      layouts+=("1 $per_host - 1x$per_host")  # one host: no link between hosts to limit
    else
      for link in "${link_list[@]}"; do layouts+=("$hosts $per_host $link ${hosts}x$per_host-$link"); done
    fi
  done
  if [[ ",$cluster" =~ ,([2-9]|[1-9][0-9]+)x ]]; then
    check=$("$DPT_ROOT/tools/cluster.sh" --check 2>&1) || fail "--cluster: ${check:-tools/cluster.sh --check failed}"
  fi
fi

# The batch the config gives each process (train prints it resolved).
batch=$(grep -E '^batch_size:' "$config" | head -1 | sed 's/[^0-9]*\([0-9]*\).*/\1/')
batch=${batch:-128}  # train's default
for s in "${sets[@]}"; do [[ "$s" =~ ^batch_size=([0-9]+)$ ]] && batch=${BASH_REMATCH[1]}; done
min_np=$(printf '%s\n' "${np_list[@]}" | sort -n | head -1)
global=$((batch * min_np))
if [ "$mode" = strong ]; then
  for np in "${np_list[@]}"; do
    [ $((global % np)) -eq 0 ] || fail "--strong: the global batch $global does not divide by $np processes"
  done
fi

cores=$(nproc)
slots=${slots:-$((cores / threads > 0 ? cores / threads : 1))}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 DPT_TTY=0
mkdir -p "$out"
# An earlier sweep's runs and results.
rm -rf "$out"/np[0-9]* "$out"/[0-9]*x[0-9]* "$out"/results.csv "$out"/results.md "$out"/scaling.png "$out"/sweep.json
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
# Percent of the cores busy over the next 2 seconds (/proc/stat: user..steal against idle+iowait).
busy_percent() {
  local a b
  read -r -a a < <(head -1 /proc/stat)
  sleep 2
  read -r -a b < <(head -1 /proc/stat)
  local total=0 idle=$(( (b[4] + b[5]) - (a[4] + a[5]) ))
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  echo $(( total > 0 ? 100 * (total - idle) / total : 0 ))
}
busy_runs=0
wait_for_idle() {
  [ "$wait_idle" = 1 ] || return 0
  local busy
  for _ in $(seq 300); do
    busy=$(busy_percent)
    [ "$busy" -gt 10 ] || return 0
  done
  echo "warning: the cores are still ${busy}% busy after 10 minutes: running anyway" >&2
  busy_runs=$((busy_runs + 1))
}

oversubscribed=()
for np in $(printf '%s\n' "${np_list[@]}" | sort -un); do
  if [ "$np" -gt "$slots" ]; then
    echo "warning: $np processes on $slots slot(s) ($cores cores, $threads thread(s) a rank): oversubscribing" >&2
    oversubscribed+=("$np")
  fi
done
# Repeats go round the layouts and variants, so a burst of load elsewhere spreads over all.
for r in $(seq "$repeats"); do
  for layout in "${layouts[@]}"; do
    read -r hosts per_host link folder <<< "$layout"
    np=$((hosts * per_host))
    per_rank=$batch
    [ "$mode" = weak ] || per_rank=$((global / np))
    binding=(--map-by "slot:PE=$threads" --bind-to core)
    [ "$np" -le "$slots" ] || binding=(--oversubscribe --bind-to none)
    # A mapping in --mpirun-args (hosts: --map-by ppr:8:node) replaces ours.
    [[ " ${mpirun_args[*]} " != *" --map-by "* && " ${mpirun_args[*]} " != *" --bind-to "* ]] || binding=()
    run_args=(--set "batch_size=$per_rank" --set "threads=$threads")
    [ -z "$steps" ] || run_args+=(--set epochs=1 --set "max_steps_per_epoch=$steps")
    [ -z "$epochs" ] || run_args+=(--set "epochs=$epochs")
    for variant in "${variants[@]}"; do
      read -r -a words <<< "$variant"
      variant_sets=()
      for kv in "${words[@]:1}"; do variant_sets+=(--set "$kv"); done
      dir="$out/$folder${words[0]:+-${words[0]}}/r$r"
      mkdir -p "$dir"
      wait_for_idle
      echo "== $folder${words[0]:+ ${words[0]}}: np $np (batch $per_rank a rank), repeat $r: $dir"
      train_command=("$train" "$config" "${sets[@]}" "${variant_sets[@]}" "${run_args[@]}" --set "output.dir=$dir"
        --timeline "$dir/timeline.json")
      if [ "$link" = - ]; then
        mpirun -np "$np" "${binding[@]}" "${mpirun_args[@]}" -x DPT_TTY "${train_command[@]}" > "$dir.log" 2>&1
      else
        # Each host's ranks share the host's cores (tools/cluster.sh binds them there).
        link_args=()
        [ "$link" = none ] || link_args=(--link "$link")
        "$DPT_ROOT/tools/cluster.sh" --nodes "$hosts" --per-node "$per_host" "${link_args[@]}" \
          --mpirun-args "-x DPT_TTY ${mpirun_args[*]}" -- "${train_command[@]}" > "$dir.log" 2>&1
      fi || { tail -5 "$dir.log" >&2; fail "$folder${words[0]:+ ${words[0]}} failed (log: $dir.log)"; }
      grep -E '^(model|epoch [0-9]+:|done)' "$dir.log" || true
      # What the report tells the runs apart by.
      printf '{"hosts": %d, "per_host": %d, "link": "%s", "variant": "%s"}\n' \
        "$hosts" "$per_host" "${link/#-/}" "${words[0]:-}" > "$dir/run.json"
    done
  done
done
# How the runs were made, for the report.
command="tools/scaling.sh $config${nps:+ --np $nps}${cluster:+ --cluster $cluster --link $links}"
command+="${steps:+ --steps $steps}${epochs:+ --epochs $epochs} --$mode"
[ "$threads" = 1 ] || command+=" --threads $threads"
[ "$repeats" = 1 ] || command+=" --repeats $repeats"
[ -z "$target" ] || command+=" --target $target"
[ "$wait_idle" = 0 ] || command+=" --wait-idle"
for v in "${variants[@]}"; do [ -z "$v" ] || command+=" --variant \"$v\""; done
for ((i = 1; i < ${#sets[@]}; i += 2)); do command+=" --set ${sets[i]}"; done
/usr/bin/python3 - "$out/sweep.json" "$command" "$mode" "$threads" "$cores" "$slots" "$repeats" "$target" \
  "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" "$wait_idle" "$busy_runs" "${variant_names[*]}" "$cluster" \
  "$links" "${oversubscribed[@]}" <<'PY'
import json, sys, time
(path, command, mode, threads, cores, slots, repeats, target, before, after, wait_idle, busy, variants, cluster, links,
 *over) = sys.argv[1:]
json.dump({"command": command, "mode": mode, "variants": variants.split(),
           "cluster": cluster.split(",") if cluster else None, "links": links.split(",") if cluster else None,
           "threads_per_rank": int(threads), "cores": int(cores),
           "slots": int(slots), "repeats": int(repeats), "target": float(target) if target else None,
           "load_average": {"before": before, "after": after}, "oversubscribed": [int(n) for n in over],
           "waited_for_idle": wait_idle == "1", "runs_started_busy": int(busy),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, open(path, "w"), indent=1)
PY
/usr/bin/python3 "$DPT_ROOT/tools/scaling_report.py" "$out"
