#!/usr/bin/env bash
# Fetches a dataset into data/ where the internet is reachable, and checks it.
#   tools/download_data.sh mnist     -> data/mnist/*.gz
#   tools/download_data.sh cifar10   -> data/cifar10/cifar-10-batches-bin/*.bin
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
  cifar10)
    dir="$root/data/cifar10"
    mkdir -p "$dir"
    url="https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
    archive="$dir/cifar-10-binary.tar.gz"
    md5=c32a1d4ab5d03f1284b67883e8d87530  # as torchvision lists it
    if [ ! -f "$archive" ]; then
      # Download beside the archive and rename, so a cut-off transfer never looks complete.
      curl -fsSL --retry 3 --connect-timeout 20 -o "$archive.part" "$url" ||
        { rm -f "$archive.part"; echo "error: could not download $url (no internet here?)" >&2; exit 1; }
      mv "$archive.part" "$archive"
    fi
    echo "$md5  $archive" | md5sum -c --quiet - ||
      { echo "error: $archive: checksum mismatch (expected md5 $md5); removed it, run again" >&2
        rm -f "$archive"; exit 1; }
    tar -xzf "$archive" -C "$dir" ||
      { echo "error: could not extract $archive into $dir" >&2; exit 1; }
    for f in data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin test_batch.bin; do
      [ -f "$dir/cifar-10-batches-bin/$f" ] ||
        { echo "error: $archive did not contain cifar-10-batches-bin/$f" >&2; exit 1; }
    done
    echo "CIFAR-10 is in $dir/cifar-10-batches-bin" ;;
  *) echo "usage: tools/download_data.sh mnist|cifar10" >&2; exit 2 ;;
esac
