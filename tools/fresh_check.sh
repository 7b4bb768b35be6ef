#!/usr/bin/env bash
# The README's two commands as a new user meets them: on a minimal Debian 12 root
# (debootstrap --variant=minbase bookworm, nothing else: no CUDA, no compiler), a clone of this
# checkout's HEAD runs tools/test.sh and then tools/run.sh; each one's exit code and time is
# printed. Exit 0 only when both exit 0.
#   tools/fresh_check.sh          (as root: debootstrap, chroot and mounts need it)
# DPT_FRESH_CACHE (default /var/cache/dpt-fresh) keeps the bootstrapped base and the downloaded
# packages between runs; each run starts from a copy of the base, removed at the end (its logs
# stay in DPT_FRESH_CACHE/logs). DPT_FRESH_MIRROR: the Debian mirror (default deb.debian.org).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$(realpath -m "${DPT_FRESH_CACHE:-/var/cache/dpt-fresh}")"
mirror="${DPT_FRESH_MIRROR:-http://deb.debian.org/debian}"
base="$cache/base" root="$cache/root" debs="$cache/debs" logs="$cache/logs"
say() { echo "fresh_check: $*"; }
fail() {
  say "$*" >&2
  exit 2
}

[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, chroot and mounts): sudo $0"
command -v git >/dev/null || fail "needs git, to clone $repo"
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null || fail "apt-get install debootstrap failed"
fi

# --- The root's mounts, and a cleanup that undoes them on every way out.
mounted() { grep -q " $root[/ ]" /proc/self/mounts; }
cleanup() {
  # A process left in the root (a rank of a test that timed out) would keep its mounts busy.
  local p
  for p in /proc/[0-9]*; do
    if [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ]; then kill -9 "${p#/proc/}" 2>/dev/null || true; fi
  done
  # Deepest first; lazily if a mount is still busy.
  local m
  for m in $(grep -o " $root[/ ][^ ]*" /proc/self/mounts | sed 's/^ //' | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" || true
  done
  # Only once nothing is mounted there: rm would otherwise go into the bound package cache.
  if mounted; then say "$root is still mounted; not removing it" >&2; else rm -rf "$root"; fi
}
cleanup  # what an interrupted run may have left
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- The base: bootstrapped once, under a temporary name renamed when complete.
mkdir -p "$cache" "$debs/partial" "$logs"
if [ ! -d "$base" ]; then
  say "bootstrapping Debian 12 (minbase) into $base (log: $logs/debootstrap.log)"
  rm -rf "$base.partial"
  debootstrap --variant=minbase bookworm "$base.partial" "$mirror" >"$logs/debootstrap.log" 2>&1 ||
    fail "debootstrap failed (log: $logs/debootstrap.log)"
  mv "$base.partial" "$base"
fi
cp -a "$base" "$root"
cp /etc/resolv.conf /etc/hosts "$root/etc/"  # this machine's network, as a user's machine has its own
for m in proc sys dev dev/pts dev/shm; do mount --bind "/$m" "$root/$m"; done
mount --bind "$debs" "$root/var/cache/apt/archives"  # downloads kept for the next run

# --- This checkout's HEAD, cloned as a user would (uncommitted changes are not in it).
head="$(git -C "$repo" rev-parse HEAD)"
[ -z "$(git -C "$repo" status --porcelain --untracked-files=no)" ] ||
  say "warning: $repo has uncommitted changes; checking HEAD ($head) without them"
git clone -q --no-checkout "$repo" "$root/root/dpt"
git -C "$root/root/dpt" checkout -q --detach "$head"
say "checking ${head:0:12} on a clean Debian $(cat "$root/etc/debian_version") root"

# Runs "$@" in the root's clone with a plain environment (nothing from this machine's).
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin bash -c 'cd /root/dpt && "$@"' in_root "$@"
}
results=() failed=0
for command in tools/test.sh tools/run.sh; do
  say "--- $command (log: $logs/$(basename "$command" .sh).log)"
  start=$SECONDS
  set +e
  in_root "$command" 2>&1 | tee "$logs/$(basename "$command" .sh).log"
  code=${PIPESTATUS[0]}
  set -e
  results+=("$command: exit $code in $((SECONDS - start)) s")
  [ "$code" -eq 0 ] || failed=1
done
for r in "${results[@]}"; do say "$r"; done
exit "$failed"
