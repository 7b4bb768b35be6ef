#!/usr/bin/env bash
# Packs, on this Debian machine, what tools/gpu_check.sh needs on a GPU machine that has
# CUDA, cuDNN, NCCL, CMake, Ninja and PyTorch but no apt: OpenMPI, yaml-cpp, GoogleTest and
# oneDNN (headers, CMake configs, libraries) and the shared libraries they load. Each
# package is fetched with `apt-get download` and unpacked with `dpkg -x` into .carry/
# (git-ignored); docs, man pages and other unused files are dropped to stay well under
# the 64 MiB a device run can carry.
#   tools/gpu_carry.sh            # then: run tools/gpu_check.sh there, carrying .carry
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
carry="$root/.carry"

# What the build and the CUDA tests need, by package. libopenmpi-dev's other dependencies
# (Fortran, InfiniBand and PMIx development packages) only matter for Fortran programs
# and for multi-node runs, and would take the folder far past its budget.
packages=(
  libopenmpi-dev openmpi-bin openmpi-common libopenmpi3                   # MPI headers, mpicc, libmpi
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 libudev1        # what libmpi loads
  libyaml-cpp-dev libyaml-cpp0.7                                         # config files
  libgtest-dev libgmock-dev                                              # the tests
  libdnnl-dev libdnnl2                                                   # CPU kernels
  ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers  # oneDNN's CMake config asks for OpenCL
  zlib1g-dev zlib1g                                                      # gzip-compressed IDX files
)

debs="$(mktemp -d)"
trap 'rm -rf "$debs"' EXIT
chmod a+rwx "$debs"  # apt downloads as its own user, _apt
if ! (cd "$debs" && apt-get download "${packages[@]}" >/dev/null); then
  echo "gpu_carry: apt-get download failed (run 'apt-get update' first?)" >&2
  exit 1
fi

rm -rf "$carry"
mkdir -p "$carry"
for deb in "$debs"/*.deb; do dpkg -x "$deb" "$carry"; done
# Nothing a build or a test run reads: documentation, Java and Fortran bindings, static
# copies of libraries that are also shared, OpenSHMEM, and OpenMPI's internal headers
# (mpi.h does not include them).
mpi="$carry/usr/lib/x86_64-linux-gnu/openmpi"
rm -rf "$carry"/usr/share/{doc,man,lintian,bug,info} "$carry"/usr/lib/x86_64-linux-gnu/fortran \
  "$mpi"/include/{openmpi,openshmem,mpp} "$mpi"/include/*shmem*
mkdir -p "$mpi/include/openmpi"  # mpicc still names it, and CMake rejects missing include paths
find "$carry" \( -name '*.mod' -o -name 'libmpi_java*' -o -name 'libmpi_usempi*' -o -name 'libmpi_mpifh*' \
  -o -name 'mpi.jar' -o -name 'liboshmem*' -o -name 'libevent*.a' -o -name 'libhwloc.a' -o -name 'libz.a' \
  -o -name 'libyaml-cpp.a' \) -exec rm -rf {} +

# Symlinks must point within the tree wherever it is unpacked: absolute ones (libz.so ->
# /lib/x86_64-linux-gnu/libz.so.1...) are made relative, and Debian's alternatives
# (/etc/alternatives/mpi...) are replaced by direct links.
find "$carry" -type l -lname '/*' | while read -r link; do
  target="$carry$(readlink "$link")"
  [ -e "$target" ] && ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$target")" "$link"
done
bin="$carry/usr/bin"
[ -e "$bin/mpicc" ] || ln -sf mpicc.openmpi "$bin/mpicc"
[ -e "$bin/mpirun" ] || ln -sf mpirun.openmpi "$bin/mpirun"
echo "gpu_carry: $(du -sh "$carry" | cut -f1) in $carry ($(ls "$debs" | wc -l) packages)"
