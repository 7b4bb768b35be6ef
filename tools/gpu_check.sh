#!/usr/bin/env bash
# One command for a machine with one NVIDIA GPU: builds dpt with the CUDA backend for this
# GPU's architecture, runs every CUDA test (tests/test_cuda_*.cpp) and writes their results
# as a table to a file it names at the end, followed by a training-throughput table (dpt
# beside PyTorch eager where PyTorch with CUDA is importable).
#   tools/gpu_check.sh            # build in build-gpu/ (DPT_GPU_BUILD overrides)
# Needs nvcc (CUDA 13), CMake and Ninja. nvcc, cuBLAS, cuDNN and NCCL may be installed
# system-wide or come from CUDA 13's Python wheels (nvidia/cu13, nvidia/cudnn, nvidia/nccl
# under site-packages; CUBLAS_ROOT, CUDNN_ROOT and NCCL_ROOT override). OpenMPI, yaml-cpp,
# GoogleTest and oneDNN come from the system or from the folder tools/gpu_carry.sh fills on
# a Debian machine (.carry/). Without a usable GPU it still builds every CUDA target, then
# exits 1 with "no CUDA device". Exit 0 only when every CUDA test ran and passed. Where $OUT
# names a folder (the device machine's return folder), the table and logs are copied there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DPT_GPU_BUILD:-$root/build-gpu}"
python="${PYTHON:-python3}"
say() { echo "gpu_check: $*"; }
# On the lent device machine, whatever lands in $OUT comes back: the table and the logs.
save_outputs() {
  if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    local file
    for file in gpu_check.md gpu_check.ctest.log gpu_check.bench.log gpu_check.sanitizer.log configure.log build.log; do
      [ -f "$build/$file" ] && cp "$build/$file" "$OUT/" || true
    done
  fi
}
trap save_outputs EXIT
cmake_args=()

# --- Carried Debian packages: headers, CMake configs and libraries under .carry/usr.
carry="$root/.carry/usr"
if [ -d "$carry" ]; then
  multiarch="$carry/lib/x86_64-linux-gnu"
  export OPAL_PREFIX="$carry"  # OpenMPI's tools and plugins, relocated
  export PATH="$carry/bin:$PATH"
  export LD_LIBRARY_PATH="$multiarch:$multiarch/openmpi/lib:$root/.carry/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cmake_args+=("-DCMAKE_PREFIX_PATH=$carry" "-DMPI_C_COMPILER=$carry/bin/mpicc")
  say "using carried packages in $carry"
fi

# --- nvcc: on the PATH, in /usr/local/cuda, or from CUDA 13's Python wheels (nvidia/cu13/bin).
wheel_dir() {  # the folder of Python package $1 (e.g. nvidia.cudnn), or nothing
  "$python" -c "import $1 as m, os; print(os.path.dirname(m.__file__) if m.__file__ else list(m.__path__)[0])" \
    2>/dev/null || true
}
CUDACXX=""
for nvcc in "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc "$(wheel_dir nvidia.cu13)/bin/nvcc"; do
  [ -x "$nvcc" ] && "$nvcc" --version >/dev/null 2>&1 && CUDACXX="$nvcc" && break
done
[ -n "$CUDACXX" ] || { say "no working nvcc on the PATH, in /usr/local/cuda/bin or in Python's nvidia/cu13/bin"; exit 2; }
export CUDACXX PATH="$(dirname "$CUDACXX"):$PATH"
say "nvcc: $CUDACXX ($("$CUDACXX" --version | grep -o 'release [0-9.]*'))"

# --- cuBLAS, cuDNN and NCCL: beside nvcc or system-wide if their headers are there, else
# from CUDA 13's Python wheels (cuBLAS in nvidia/cu13, cuDNN in nvidia/cudnn, NCCL in
# nvidia/nccl); CUBLAS_ROOT, CUDNN_ROOT and NCCL_ROOT override. CMakeLists.txt reads them.
cuda_include="$(dirname "$CUDACXX")/../include"
find_library_root() {  # $1 = CUBLAS, CUDNN or NCCL, $2 = header, $3... = wheel packages to try
  local name="$1" var="${1}_ROOT" header="$2" dir package
  shift 2
  if [ -n "${!var:-}" ]; then say "$var=${!var}"; return; fi
  for dir in "$cuda_include" /usr/include /usr/include/x86_64-linux-gnu; do
    [ -f "$dir/$header" ] && return
  done
  for package in "$@"; do
    dir="$(wheel_dir "$package")"
    if [ -n "$dir" ] && [ -f "$dir/include/$header" ]; then
      export "$var=$dir"
      say "$name from the Python wheel in $dir"
      return
    fi
  done
  say "$header is not beside nvcc, in /usr/include or in Python's nvidia/ wheels; configure will fail"
}
find_library_root CUBLAS cublas_v2.h nvidia.cu13 nvidia.cublas
find_library_root CUDNN cudnn.h nvidia.cudnn nvidia.cu13
find_library_root NCCL nccl.h nvidia.nccl nvidia.cu13
for var in CUBLAS_ROOT CUDNN_ROOT NCCL_ROOT; do  # cuDNN loads its engine libraries from here at run time
  [ -n "${!var:-}" ] && export LD_LIBRARY_PATH="${!var}/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done

# --- The GPU's architecture (compute capability 9.0 -> 90), else Hopper's.
arch=90
if command -v nvidia-smi >/dev/null 2>&1; then
  cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')" || true
  [[ "${cap:-}" =~ ^[0-9]+$ ]] && arch="$cap"
fi
say "building for sm_$arch in $build"

# --- Build the library and every CUDA test.
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPT_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" ${cmake_args[@]+"${cmake_args[@]}"} >"$build/configure.log" 2>&1 ||
  { tail -n 30 "$build/configure.log"; say "configure failed (log: $build/configure.log)"; exit 2; }
grep -E '^-- (dpt|Found MPI_C|Found GTest)' "$build/configure.log" | sed 's/^-- /gpu_check: /' || true
tests=()
for source in "$root"/tests/test_cuda_*.cpp "$root"/tests/test_mpi_cuda_*.cpp; do tests+=("$(basename "$source" .cpp)"); done
cmake --build "$build" -j "$(nproc)" --target dpt train bench_train "${tests[@]}" >"$build/build.log" 2>&1 ||
  { grep -E -A3 'error|FAILED' "$build/build.log" | head -n 60; say "build failed (log: $build/build.log)"; exit 2; }
say "built in $SECONDS s"

# --- Is there a device this build can use? Asked through the library itself, so a
# driver too old for the runtime counts as no device, as it would in the tests.
probe="$("$build/test_cuda_device" --gtest_filter=CudaGpu.DeviceQueries 2>&1 || true)"
if grep -q "no CUDA device" <<<"$probe"; then
  say "built every CUDA target, but $(grep -m 1 -o 'no CUDA device.*' <<<"$probe")"
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu_check: GPU: /' || true

# --- Run the CUDA tests; one table row per test. NCCL says why it fails, if it does. Four
# at a time: each test case is a process of its own, much of whose time is CUDA's, cuDNN's
# and cuBLAS's start-up; none needs the GPU to itself (the out-of-memory test asks for 4 PB).
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
table="$build/gpu_check.md"
log="$build/gpu_check.ctest.log"
set +e
(cd "$build" && ctest -R '^Cuda' -j 4 --timeout 120 --output-on-failure) >"$log" 2>&1
set -e
{
  echo "# dpt CUDA tests on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1) (sm_$arch)"
  echo
  echo "| test | result | seconds |"
  echo "|---|---|---|"
  sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.*[* ]*(Passed|Failed|Skipped|Not Run|Timeout|Exception)[^0-9]*([0-9.]+) sec.*/| \1 | \2 | \3 |/p' "$log"
} >"$table"
# --- Benchmarks: training images/s on one fixed synthetic batch (bench_train beside
# tools/bench/torch_train.py), appended to "$table". bf16 rows run channels-last on both
# sides; fp32 is IEEE f32 on both (no TF32). "dpt graphs" is bench_train --cuda-graphs
# ("n/a" if it fails). Sized to stay well
# inside the script's 8 minutes on one H200.
bench_value() {  # images/s from a JSON line on stdin (dpt's has no space after the colon), or "failed"
  tee -a "$bench_log" | grep -oE '"images_per_sec": ?[0-9.]+' | sed 's/.*: *//' |
    awk '{printf "%.0f", $1} END {if (NR == 0) printf "failed"}'
}
have_torch=0
"$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null && have_torch=1
# The script must end within 8 minutes whatever the machine: rows left when the time is up
# are listed as skipped (DPT_GPU_CHECK_BUDGET_S, seconds since the script started, 420 by
# default), and the rows the goals name run first.
budget_s="${DPT_GPU_CHECK_BUDGET_S:-420}"
bench_row() {  # model batch precision steps c h w
  if [ "$SECONDS" -ge "$budget_s" ]; then
    echo "| $1 | $2 | $3 | skipped: ${budget_s} s budget spent | | | |"
    say "bench $1 batch $2 $3: skipped, the ${budget_s} s budget is spent" >&2
    return
  fi
  local model="$1" batch="$2" precision="$3" steps="$4" shape=("$5" "$6" "$7") flags=(--device cuda --precision "$3")
  [ "$precision" = bf16 ] && flags+=(--channels-last)
  local dpt graphs torch ratio="n/a"
  dpt="$("$build/bench_train" "$model" "$batch" 0 "$steps" "${shape[@]}" "${flags[@]}" 2>>"$bench_log" | bench_value || true)"
  graphs="$("$build/bench_train" "$model" "$batch" 0 "$steps" "${shape[@]}" "${flags[@]}" --cuda-graphs 2>>"$bench_log" |
    bench_value || true)"
  [ "$graphs" = failed ] && graphs="n/a"
  torch="n/a"
  if [ "$have_torch" = 1 ]; then
    torch="$("$python" "$root/tools/bench/torch_train.py" "$model" "$batch" 0 "$steps" "${shape[@]}" "${flags[@]}" \
      2>>"$bench_log" | bench_value || true)"
  fi
  if [[ "$dpt" =~ ^[0-9]+$ && "$torch" =~ ^[0-9]+$ ]]; then ratio="$(awk -v a="$dpt" -v b="$torch" 'BEGIN {printf "%.2fx", a / b}')"; fi
  echo "| $model | $batch | $precision | $dpt | $graphs | $torch | $ratio |"
  say "bench $model batch $batch $precision: dpt $dpt, graphs $graphs, pytorch $torch ($ratio)" >&2
}
bench_log="$build/gpu_check.bench.log"
: >"$bench_log"
{
  echo
  echo "## Training throughput, images/s (synthetic batch; SGD momentum 0.9, Nesterov)"
  echo
  echo "Goals on H200: ResNet-20 bf16 at batch 512 >= 1.5x PyTorch eager; ResNet-18 bf16 at batch 512 >= 30,000 images/s."
  echo
  echo "| model | batch | precision | dpt eager | dpt graphs | PyTorch eager | dpt / PyTorch |"
  echo "|---|---|---|---|---|---|---|"
  bench_row resnet20 512 bf16 200 3 32 32  # the goals' rows first
  bench_row resnet18 512 bf16 100 3 32 32
  bench_row resnet20 128 bf16 200 3 32 32
  for precision in fp32 bf16; do
    for batch in 128 512; do
      [ "$precision" = fp32 ] && bench_row resnet20 "$batch" fp32 200 3 32 32
      bench_row mnist_cnn "$batch" "$precision" 200 1 28 28
    done
  done
} >>"$table"

# --- Failed tests once more under compute-sanitizer's memcheck, while the 8 minutes last
# (at most three, each until 470 s), so that one run on a GPU machine also names the kernel
# and the address of an out-of-bounds access. Its report: gpu_check.sanitizer.log.
sanitizer="$(command -v compute-sanitizer || true)"
[ -z "$sanitizer" ] && [ -x "$(dirname "$CUDACXX")/../compute-sanitizer/compute-sanitizer" ] &&
  sanitizer="$(dirname "$CUDACXX")/../compute-sanitizer/compute-sanitizer"
failed=($(sed -nE 's/^\| (Cuda[^ ]+) \| (Failed|Exception|Timeout) \|.*/\1/p' "$table" | grep -v '^CudaMpi' | head -n 3 || true))
if [ -n "$sanitizer" ] && [ "${#failed[@]}" -gt 0 ]; then
  sanitizer_log="$build/gpu_check.sanitizer.log"
  : >"$sanitizer_log"
  for name in "${failed[@]}"; do
    left=$((470 - SECONDS))
    [ "$left" -lt 20 ] && { echo "== $name: no time left" >>"$sanitizer_log"; continue; }
    program="$(cd "$build" && ctest -R "^$name\$" --show-only=json-v1 |
      "$python" -c 'import json, sys; print(json.load(sys.stdin)["tests"][0]["command"][0])')" || continue
    echo "== $name ($program, memcheck, up to $left s)" >>"$sanitizer_log"
    (cd "$build" && DPT_SOURCE_DIR="$root" timeout "$left" "$sanitizer" --tool memcheck --print-limit 20 \
      "$program" --gtest_filter="$name") >>"$sanitizer_log" 2>&1 || true
    say "$name again under compute-sanitizer: $(grep -o 'ERROR SUMMARY: [0-9]* errors' "$sanitizer_log" | tail -n 1)"
  done
fi

# Only CTest's Passed counts: a test that checked nothing (no GPU for it, a build without
# CUDA) is Skipped (docs/testing.md), and every row that is not Passed fails the check.
passed=$(grep -c '^| Cuda[^ ]* | Passed |' "$table" || true)
skipped=$(grep -c '^| Cuda[^ ]* | Skipped |' "$table" || true)
total=$(grep -c '^| Cuda' "$table" || true)
cat "$table"
say "$passed of $total CUDA tests passed, $skipped skipped, $((total - passed - skipped)) failed; table: $table (ctest log: $log)"
[ "$total" -gt 0 ] && [ "$passed" -eq "$total" ]
