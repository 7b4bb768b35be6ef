#!/usr/bin/env bash
# Installs what dpt needs from Debian's packages (only what is missing) and builds it in
# build/ (Release). Sourced by tools/run.sh and tools/test.sh; safe to run again.
set -euo pipefail
DPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# python3-torch: test_torch_interop loads dpt's checkpoints in PyTorch (it skips without it);
# python3-matplotlib: the scaling and run plots.
dpt_packages=(g++ cmake ninja-build pkg-config libopenmpi-dev openmpi-bin libyaml-cpp-dev libdnnl-dev
              zlib1g-dev libgtest-dev dataset-fashion-mnist python3-torch python3-numpy python3-matplotlib)

dpt_install() {
  local missing=()
  for p in "${dpt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "dpt: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

dpt_build() {
  cmake -S "$DPT_ROOT" -B "$DPT_ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${DPT_CMAKE_ARGS:-} >/dev/null
  cmake --build "$DPT_ROOT/build" -j "$(nproc)"
}

dpt_install
[ "${DPT_INSTALL_ONLY:-0}" = 1 ] || dpt_build  # tools/sanitize.sh builds elsewhere
