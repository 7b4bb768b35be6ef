#!/usr/bin/env bash
# A cluster in a box: N hosts as network namespaces, each with its own hostname, address and
# link to one switch, and mpirun across them — TCP between hosts, shared memory within one, as
# on real machines — so that multi-machine runs can be tried and tested on one machine.
#   tools/cluster.sh [--nodes N] [--per-node P] [--link RATE] [--mpirun-args "ARGS"] -- PROGRAM [ARGS...]
#   tools/cluster.sh --check      (exit 0 where namespaces can be made, else 2 with the reason)
# N hosts (2) x P processes (1), ranks 0..P-1 on host 0; RATE limits each host's link in both
# directions (a tc rate: 100mbit, 1gbit, 10gbit). Exit: the program's (mpirun's) exit code; 2
# for bad arguments or where namespaces cannot be made. Everything it makes is removed on
# every way out (normal end, error, Ctrl-C, SIGTERM; after a SIGKILL, by the next run). Ctrl-C
# and SIGTERM reach the program as SIGUSR1, which train answers with a checkpoint.
#
# What it makes (k: a slot free at start, taken under a lock, so that runs at once never meet):
#   namespace dpt<k>-sw    the switch: a bridge with one veth port per host;
#   namespace dpt<k>-n<i>  host i: hostname dpt<k>-n<i> (its own UTS namespace), eth0 =
#                          10.213.<k>.<i+1>/24, and 1/N of the machine's cores when N <= cores.
# mpirun runs on host 0 and starts the other hosts' daemons through an rsh agent that does what
# ssh does: runs the command line with sh, in that host's namespace, under its hostname. The
# root namespace gets no address and no route: the cluster talks only to itself. Open MPI keeps
# ranks of different hosts apart (TCP, btl_tcp_if_include the cluster's subnet) and lets those
# of one host share memory (vader), because it tells hosts apart by their daemons.
# Not modelled: latency (the netem qdisc is missing here), separate filesystems (/tmp, /dev/shm
# and the working directory are the machine's), separate environments (every host inherits the
# caller's; ssh would not), and hosts do not get cores of their own beyond the split above.
set -uo pipefail
usage() { sed -n '5,6p' "$0" | sed 's/^# \{0,1\}//'; }
fail() { echo "cluster.sh: $*" >&2; exit 2; }
# The one line for "this machine cannot host a cluster" (CTest matches it to report Skipped).
unable() { echo "cluster.sh: no network namespaces: $*" >&2; exit 2; }

nodes=2 per_node=1 rate="" check=0 mpirun_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes="${2:-}"; shift 2 || fail "--nodes needs a value" ;;
    --per-node) per_node="${2:-}"; shift 2 || fail "--per-node needs a value" ;;
    --link) rate="${2:-}"; shift 2 || fail "--link needs a value" ;;
    --mpirun-args) read -r -a mpirun_args <<< "${2:-}"; shift 2 || fail "--mpirun-args needs a value" ;;
    --check) check=1; shift ;;
    --) shift; break ;;
    -h|--help) usage; exit 0 ;;
    *) fail "unexpected '$1' before '--' (usage: $(usage | head -1 | sed 's/^ *//'))" ;;
  esac
done
[ $# -gt 0 ] || [ "$check" = 1 ] || fail "no program after '--' (usage: $(usage | head -1 | sed 's/^ *//'))"
[[ "$nodes" =~ ^[1-9][0-9]*$ ]] && [ "$nodes" -le 250 ] || fail "--nodes expects 1..250 hosts, got '$nodes'"
[[ "$per_node" =~ ^[1-9][0-9]*$ ]] || fail "--per-node expects a positive whole number, got '$per_node'"
rate_bytes=""
if [ -n "$rate" ]; then
  [[ "$rate" =~ ^([0-9]+(\.[0-9]+)?)(kbit|mbit|gbit)$ ]] ||
    fail "--link expects a rate like 100mbit, 1gbit or 10gbit, got '$rate'"
  rate_bytes=$(awk -v n="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[3]}" \
    'BEGIN { printf "%d", n * (u == "kbit" ? 1e3 : u == "mbit" ? 1e6 : 1e9) / 8 }')
  [ "$rate_bytes" -ge 1000 ] || fail "--link expects at least 8kbit, got '$rate'"
fi

[ "$(id -u)" -eq 0 ] || unable "making them needs root (this is uid $(id -u))"
for tool in ip tc unshare taskset flock mpirun; do
  command -v "$tool" >/dev/null || unable "'$tool' is not on PATH"
done

state=/run/dpt-cluster  # slot owners and the allocation lock
mkdir -p "$state" 2>/dev/null || unable "cannot create $state"

if [ "$check" = 1 ]; then
  probe="dpt-probe-$$"
  # The probe goes however the check ends: a test's timeout or ^C must not leave it behind.
  trap 'ip netns del "$probe" 2>/dev/null; rm -f "$state/probe.$$"' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  ip netns add "$probe" 2>"$state/probe.$$" || unable "ip netns add: $(head -1 "$state/probe.$$")"
  # Entering one can still fail (in a chroot, / is no mount point for ip's private remount).
  ip -n "$probe" link set lo up 2>"$state/probe.$$" || reason=$(head -1 "$state/probe.$$")
  [ -z "${reason:-}" ] || unable "cannot enter one: $reason"
  exit 0
fi

slot="" work="" mpirun_pid=""

# Processes still inside a namespace keep it alive: end them, then drop its name (its veth
# ends, and the bridge of the switch, go with it).
namespace_remove() {
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null)
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  ip netns del "$1" 2>/dev/null
}

slot_remove() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^dpt$1-(sw|n[0-9]+)$"); do
    namespace_remove "$ns"
  done
  rm -f "$state/$1.pid"
}

# Takes the lowest slot without a living owner (removing what a killed owner left behind).
slot_claim() {
  local k owner
  exec 9>"$state/lock"
  flock 9
  for k in $(seq 1 250); do
    owner=$(cat "$state/$k.pid" 2>/dev/null)
    [ -n "$owner" ] && kill -0 "$owner" 2>/dev/null && continue
    slot_remove "$k"
    echo $$ > "$state/$k.pid"
    slot=$k
    break
  done
  exec 9>&-
  [ -n "$slot" ] || fail "all 250 cluster slots are taken (see $state)"
}

cleanup() {
  local code=$?
  # Ignored, not reset: a signal sent to the whole process group (as timeout and a terminal's
  # Ctrl-C do) may arrive twice, and the second must not cut the cleanup short.
  trap '' INT TERM HUP
  trap - EXIT
  if [ -n "$mpirun_pid" ] && kill -0 "$mpirun_pid" 2>/dev/null; then
    # mpirun forwards SIGUSR1 to every rank (SIGTERM would have it kill them 1 s later):
    # train checkpoints and stops, other programs end.
    kill -USR1 "$mpirun_pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  [ -n "$slot" ] && slot_remove "$slot"
  [ -n "$work" ] && rm -rf "$work"
  exit "$code"
}
trap cleanup EXIT
trap 'echo "cluster.sh: SIGINT: stopping the run" >&2; exit 130' INT
trap 'echo "cluster.sh: SIGTERM: stopping the run" >&2; exit 143' TERM
trap 'exit 129' HUP

slot_claim
prefix="dpt$slot" subnet="10.213.$slot"
work=$(mktemp -d "/tmp/dpt-cluster.$slot.XXXXXX") || fail "cannot make a temporary directory"

# A token bucket on the device's way out; bursts of 1 ms of traffic, at least 64 KB (one
# GSO packet).
link_limit() {  # namespace device
  local burst=$((rate_bytes / 1000 > 65536 ? rate_bytes / 1000 : 65536))
  ip -n "$1" link show "$2" >/dev/null && tc -n "$1" qdisc add dev "$2" root tbf rate "$rate" burst "$burst" latency 50ms
}

ip netns add "$prefix-sw" 2>"$work/err" || unable "ip netns add: $(head -1 "$work/err")"
ip -n "$prefix-sw" link set lo up 2>"$work/err" || unable "cannot enter one: $(head -1 "$work/err")"
ip -n "$prefix-sw" link add br0 type bridge && ip -n "$prefix-sw" link set br0 up ||
  fail "cannot make a bridge in namespace $prefix-sw"
cores=$(nproc)
for i in $(seq 0 $((nodes - 1))); do
  host="$prefix-n$i"
  ip netns add "$host" || fail "cannot make namespace $host"
  ip -n "$prefix-sw" link add "p$i" type veth peer name eth0 netns "$host" &&
    ip -n "$prefix-sw" link set "p$i" master br0 up &&
    ip -n "$host" addr add "$subnet.$((i + 1))/24" dev eth0 &&
    ip -n "$host" link set lo up && ip -n "$host" link set eth0 up || fail "cannot connect host $host"
  # TCP gives up on an unreachable peer after ~6 s instead of Linux's ~15 minutes: a host whose
  # link dies then ends the run in seconds (mpirun waits for its daemon there until TCP gives up).
  ip netns exec "$host" sysctl -qw net.ipv4.tcp_retries2=3 || fail "cannot set tcp_retries2 on $host"
  if [ -n "$rate" ]; then
    link_limit "$prefix-sw" "p$i" && link_limit "$host" eth0 || fail "cannot limit $host's link to $rate"
  fi
  if [ "$nodes" -le "$cores" ]; then
    echo "$((i * cores / nodes))-$(((i + 1) * cores / nodes - 1))" > "$work/$host.cpus"
  else
    echo "0-$((cores - 1))" > "$work/$host.cpus"
  fi
  echo "$host slots=$per_node" >> "$work/hostfile"
done

# mpirun's rsh agent: `agent [options] HOST COMMAND...` runs the command line as ssh would
# (its words joined by spaces, through sh), inside HOST's namespace, under its hostname, on
# its cores.
cat > "$work/agent" <<EOF
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
exec ip netns exec "\$host" unshare --uts sh -c 'hostname "\$1" && exec taskset -c "\$2" sh -c "\$3"' \\
  sh "\$host" "\$(cat "$work/\$host.cpus")" "\$*"
EOF
chmod +x "$work/agent"

# More ranks than cores: a rank waiting in MPI must give its core to the one it waits for.
# Open MPI yields when idle by itself when it knows a node is oversubscribed, but the
# hostfile's slots are the ranks, not the cores a host gets here; without it a waiting rank
# spins away its time slice, and each all-reduce at 2x2 takes 16-30 ms instead of 0.2-1.
oversubscribed=()
[ $((nodes * per_node)) -le "$cores" ] || oversubscribed=(--mca mpi_yield_when_idle 1)

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_command=(mpirun -np $((nodes * per_node)) --hostfile "$work/hostfile" --map-by slot --bind-to none
  --mca plm_rsh_agent "$work/agent" --mca pml ob1 --mca btl tcp,vader,self
  --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" "${oversubscribed[@]}"
  "${mpirun_args[@]}" "$@")
# mpirun runs on host 0, in the background so that a signal reaches the traps at once, and
# in a session of its own, so that a Ctrl-C or a signal to this script's process group
# reaches only this script, which passes SIGUSR1 on (cleanup); SIGINT or SIGTERM would make
# mpirun kill the ranks 1 s later, often before train's checkpoint is written.
setsid "$work/agent" "$prefix-n0" "exec $(printf '%q ' "${mpirun_command[@]}")" &
mpirun_pid=$!
wait "$mpirun_pid"
code=$?
mpirun_pid=""
exit "$code"
