#!/usr/bin/env bash
# Fetches a dataset into data/ where the internet is reachable, and checks it.
#   tools/download_data.sh mnist
# (Fashion-MNIST comes from Debian: apt-get install dataset-fashion-mnist.)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
case "${1:-}" in
  mnist)
    dir="$root/data/mnist"
    mkdir -p "$dir"
    base="https://ossci-datasets.s3.amazonaws.com/mnist"
    # md5 of the four files, as torchvision lists them.
    declare -A sums=(
      [train-images-idx3-ubyte.gz]=f68b3c2dcbeaaa9fbdd348bbdeb94873
      [train-labels-idx1-ubyte.gz]=d53e105ee54ea40749a09fcbcd1e9432
      [t10k-images-idx3-ubyte.gz]=9fb629c4189551a2d022fa330f9573f3
      [t10k-labels-idx1-ubyte.gz]=ec29112dd5afa0611ce80d1b7f02629c
    )
    for f in "${!sums[@]}"; do
      [ -f "$dir/$f" ] || curl -fsSL --retry 3 -o "$dir/$f" "$base/$f" ||
        { echo "error: could not download $base/$f (no internet here?)" >&2; exit 1; }
      echo "${sums[$f]}  $dir/$f" | md5sum -c --quiet - ||
        { echo "error: $dir/$f: checksum mismatch" >&2; rm -f "$dir/$f"; exit 1; }
    done
    echo "MNIST is in $dir" ;;
  *) echo "usage: tools/download_data.sh mnist" >&2; exit 2 ;;
esac
