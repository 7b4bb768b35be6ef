#!/usr/bin/env bash
# Installs what dpt needs from Debian's packages (only what is missing) and builds it
# (Release). Sourced by tools/run.sh and tools/test.sh; safe to run again.
#   DPT_BUILD_DIR  the build folder (default build/; relative to the repository root)
#   DPT_CMAKE_ARGS more CMake arguments, e.g. -DDPT_CUDA=OFF
set -euo pipefail
DPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DPT_BUILD="$(cd "$DPT_ROOT" && realpath -m "${DPT_BUILD_DIR:-build}")"

# Debian 12 (bookworm). ocl-icd-opencl-dev: Debian's oneDNN CMake config requires OpenCL
# (libdnnl-dev only recommends it); libgmock-dev: the tests' <gmock/gmock.h>;
# nlohmann-json3-dev: JSON; python3-torch: test_torch_interop loads dpt's checkpoints in
# PyTorch (it skips without it); python3-matplotlib: the scaling and run plots; iproute2:
# tools/cluster.sh's simulated hosts (network namespaces).
dpt_packages=(g++ cmake ninja-build pkg-config libopenmpi-dev openmpi-bin libyaml-cpp-dev libdnnl-dev
              ocl-icd-opencl-dev zlib1g-dev libgtest-dev libgmock-dev nlohmann-json3-dev dataset-fashion-mnist
              python3-torch python3-numpy python3-matplotlib iproute2)

dpt_fail() {
  echo "dpt: $*" >&2
  exit 1
}

# Runs apt-get "$@" (as root, through sudo if need be); on failure, one line with apt's reason.
# An update that cannot reach a mirror only warns (and exits 0): its first warning is kept, as
# the reason why the install then finds no packages.
dpt_apt() {
  local out
  if out="$(DEBIAN_FRONTEND=noninteractive $dpt_sudo apt-get -q "$@" 2>&1)"; then
    [ "$1" != update ] || dpt_update_warning="$(grep -m1 -E '^(W|E): Failed to fetch' <<<"$out" || true)"
    return 0
  fi
  local reason
  reason="$(grep -E '^(E|W): ' <<<"$out" | grep -vE 'Some index files failed' | head -1 || true)"
  case "$out" in
    *"Could not get lock"* | *"is held by process"*)
      dpt_fail "apt is busy (another apt-get or dpkg holds its lock): run this again when it has finished" ;;
    *"Failed to fetch"* | *"Temporary failure resolving"* | *"Could not resolve"* | *"Unable to connect"*)
      dpt_fail "apt-get $1 could not reach the package mirror (${reason:-no network?}); check the network and /etc/apt/sources.list" ;;
    *"Unable to locate package"*)
      [ -z "${dpt_update_warning:-}" ] ||
        dpt_fail "apt-get update could not reach the package mirror ($dpt_update_warning); check the network and /etc/apt/sources.list"
      dpt_fail "apt-get $1: $(grep -m1 'Unable to locate' <<<"$out" | sed 's/^E: //') (dpt needs Debian 12 or newer with the 'main' component)" ;;
    *) dpt_fail "apt-get $1 failed: ${reason:-$(tail -n 1 <<<"$out")}" ;;
  esac
}

dpt_install() {
  command -v dpkg-query >/dev/null || { echo "dpt: not a Debian system; make sure these are installed: ${dpt_packages[*]}"; return 0; }
  local missing=()
  for p in "${dpt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  dpt_sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null ||
      dpt_fail "missing packages (${missing[*]}); installing them needs root, and there is no sudo: run this as root once, or apt-get install them"
    dpt_sudo="sudo"
  fi
  echo "dpt: installing ${#missing[@]} missing Debian packages: ${missing[*]}"
  echo "dpt: (apt-get${dpt_sudo:+, through sudo,} runs as root: packages install system-wide)"
  dpt_apt update
  dpt_apt install -y --no-install-recommends "${missing[@]}"
}

dpt_build() {
  cmake -S "$DPT_ROOT" -B "$DPT_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release ${DPT_CMAKE_ARGS:-} >/dev/null
  cmake --build "$DPT_BUILD" -j "$(nproc)"
}

dpt_install
[ "${DPT_INSTALL_ONLY:-0}" = 1 ] || dpt_build  # tools/sanitize.sh builds elsewhere
